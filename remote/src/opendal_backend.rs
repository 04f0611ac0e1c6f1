//! [`OpendalCache`]: the S3, WebDAV and plain-directory backends, through OpenDAL.
//!
//! Layout under the URL's prefix, the same for every service:
//!
//! ```text
//! cas/<sha256 hex>      blobs: file contents and tree manifests, exactly as in the local store
//! ac/<key hex>.json     action entries: the local store's ActionEntry JSON
//! ```

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use heddle_cache::Digest;
use opendal::layers::{HttpClientLayer, RetryLayer, TimeoutLayer};
use opendal::raw::HttpClient;
use opendal::{services, ErrorKind, Operator};

use crate::backend::{
    BlobStream, Endpoint, EntryBlobs, RemoteBackend, RemoteFuture, Timeouts, RETRY_MAX_DELAY,
    RETRY_MIN_DELAY,
};
use crate::bounded::BoundedBody;
use crate::config::S3Settings;
use crate::download::MAX_ENTRY_BYTES;
use crate::http_client::{is_https, HttpTls};
use crate::range_guard::{RangeGuardLayer, MORE_THAN_ASKED};
use crate::tls_files::TlsFiles;
use crate::webdav_upload::WebdavUpload;
use crate::{RemoteError, RemoteUrl};

/// Bytes per S3 multipart part. 8 MiB parts keep a 1 GiB upload at 128 parts (S3 allows
/// 10,000; parts under 5 MiB are refused).
///
/// Parts go one at a time: the part being uploaded and the one being filled are all a blob's
/// upload holds, whatever its size. OpenDAL's concurrent multipart writer (0.57) bounds the
/// parts *in flight* but not the parts that finished behind a slow one: a finished part stays
/// queued, its bytes held, until every part before it is done, and each one frees a slot for
/// another. A stalled first part let a 1 GiB upload hold 68 MB of parts here (heaptrack), and
/// over 100 MB on a loaded machine. Reading the next 8 MiB from a local file takes a few
/// milliseconds against tens for the part's PUT, so one part at a time costs little.
const PART: usize = 8 * 1024 * 1024;

pub struct OpendalCache {
    op: Operator,
    /// WebDAV only: blobs are uploaded by a streamed PUT of our own, because OpenDAL's WebDAV
    /// writer would buffer the whole blob.
    webdav: Option<WebdavUpload>,
    /// Whether a read stats the object before it GETs it (`file://` only, see `open_read`).
    stat_first: bool,
    endpoint: Endpoint,
}

impl OpendalCache {
    /// Connect lazily (no request is made here) to the service `url` names. `env` supplies
    /// the AWS variables for S3 (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, ...)
    /// and, for a remote over https, the team's CA and client certificate (`tls_files.rs`),
    /// whose files are read and checked here.
    pub fn open(
        url: &RemoteUrl,
        s3: &S3Settings,
        env: &dyn Fn(&str) -> Option<String>,
        timeouts: Timeouts,
    ) -> Result<OpendalCache, RemoteError> {
        // Before any client: OpenDAL builds its default one with the service.
        crate::crypto::install();
        let name = url.to_string();
        let setup = |source| RemoteError::Setup {
            remote: name.clone(),
            source,
        };
        let files = TlsFiles::from_env(env, &name)?;
        let mut https = false;
        let builder = match url {
            RemoteUrl::S3 { bucket, prefix } => {
                let mut b = services::S3::default()
                    .bucket(bucket)
                    .root(&format!("/{prefix}"));
                let endpoint = s3
                    .endpoint
                    .clone()
                    .or_else(|| env("AWS_ENDPOINT_URL_S3"))
                    .or_else(|| env("AWS_ENDPOINT_URL"));
                let region = s3
                    .region
                    .clone()
                    .or_else(|| env("AWS_REGION"))
                    .or_else(|| env("AWS_DEFAULT_REGION"));
                if let Some(e) = &endpoint {
                    b = b.endpoint(e);
                }
                // No endpoint is AWS itself, over https.
                https = endpoint.as_deref().is_none_or(is_https);
                // S3-compatible servers (MinIO, Ceph, moto) ignore the region but the request
                // signature needs one; AWS itself must be told.
                match (&region, &endpoint) {
                    (Some(r), _) => b = b.region(r),
                    (None, Some(_)) => b = b.region("us-east-1"),
                    (None, None) => {}
                }
                if let (Some(id), Some(secret)) =
                    (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
                {
                    b = b.access_key_id(&id).secret_access_key(&secret);
                    if let Some(token) = env("AWS_SESSION_TOKEN") {
                        b = b.session_token(&token);
                    }
                }
                Operator::new(b).map_err(setup)?.finish()
            }
            RemoteUrl::WebDav {
                endpoint,
                path,
                user,
                password,
            } => {
                https = is_https(endpoint);
                let mut b = services::Webdav::default().endpoint(endpoint).root(path);
                if let Some(u) = user {
                    b = b.username(u);
                }
                if let Some(p) = password {
                    b = b.password(p);
                }
                Operator::new(b).map_err(setup)?.finish()
            }
            RemoteUrl::Grpc { .. } => {
                return Err(RemoteError::BadUrl {
                    url: name,
                    reason: "a grpc:// remote is a REAPI server, not an OpenDAL service: open it with ReapiCache".to_string(),
                })
            }
            RemoteUrl::Fs { root } => {
                let root = root.to_string_lossy();
                // Written beside the objects and renamed into place: a reader on another
                // machine never sees half a blob.
                let b = services::Fs::default()
                    .root(&root)
                    .atomic_write_dir(&format!("{}/tmp", root.trim_end_matches('/')));
                Operator::new(b).map_err(setup)?.finish()
            }
        };
        let tls = HttpTls::for_endpoint(&files, https, &name)?;
        // OpenDAL's default client has no timeouts of its own (the timeout layer below sets
        // them); this one differs from it only in its roots and identity.
        let builder = match &tls {
            Some(tls) => builder.layer(HttpClientLayer::new(HttpClient::with(
                tls.client(reqwest::Client::builder(), &name)?,
            ))),
            None => builder,
        };
        let webdav = match url {
            RemoteUrl::WebDav {
                endpoint,
                path,
                user,
                password,
            } => Some(WebdavUpload::new(
                endpoint,
                path,
                user.clone(),
                password.clone(),
                name.clone(),
                timeouts,
                tls.as_ref(),
            )?),
            _ => None,
        };
        // The timeout layer inside the retry layer: each attempt has its own deadline, and an
        // attempt that timed out (a temporary error) is retried like a 500 or a reset
        // connection. Retried requests are idempotent here: reads, whole-object puts of
        // content-addressed blobs and entries, and multipart parts (a part re-sent replaces
        // itself). Errors that are not temporary (403, 404) are returned at once.
        // The range guard innermost: the retry layer's reader must never see a byte past the
        // range it asked for (range_guard.rs).
        let op = builder
            .layer(RangeGuardLayer)
            .layer(
                TimeoutLayer::new()
                    .with_timeout(timeouts.request)
                    .with_io_timeout(timeouts.idle),
            )
            .layer(
                RetryLayer::new()
                    .with_max_times(timeouts.retries)
                    .with_min_delay(RETRY_MIN_DELAY)
                    .with_max_delay(RETRY_MAX_DELAY)
                    .with_factor(2.0)
                    .with_jitter(),
            );
        Ok(OpendalCache {
            op,
            webdav,
            stat_first: matches!(url, RemoteUrl::Fs { .. }),
            endpoint: Endpoint { name, timeouts },
        })
    }

    /// A WebDAV upload: a streamed PUT to a temp name, then a MOVE onto the blob's name, so
    /// the blob's name never holds part of a blob.
    async fn write_webdav(
        &self,
        upload: &WebdavUpload,
        digest: Digest,
        size: u64,
        data: BlobStream,
    ) -> Result<(), RemoteError> {
        let object = format!("blob {digest}");
        let tmp = format!("tmp/{digest}.{}", unique_suffix());
        self.op
            .create_dir("tmp/")
            .await
            .map_err(self.backend_error("create folder tmp/ for", object.clone()))?;
        if let Err(e) = upload.put(digest, &tmp, size, data).await {
            let _ = self.op.delete(&tmp).await;
            return Err(e);
        }
        self.op
            .rename(&tmp, &blob_path(&digest))
            .await
            .map_err(self.backend_error("move into place", object))
    }

    fn backend_error(
        &self,
        op: &'static str,
        object: String,
    ) -> impl FnOnce(opendal::Error) -> RemoteError + '_ {
        let Endpoint { name, timeouts } = &self.endpoint;
        move |source| {
            if source.to_string().contains("timeout reached") {
                RemoteError::Timeout {
                    op,
                    object,
                    remote: name.clone(),
                    secs: timeouts.request.max(timeouts.idle).as_secs(),
                }
            } else {
                RemoteError::Backend {
                    op,
                    object,
                    remote: name.clone(),
                    source,
                }
            }
        }
    }
}

impl OpendalCache {
    /// A body as [`BlobStream`]: OpenDAL's errors as [`RemoteError::Transfer`], except the one
    /// [`RangeGuardLayer`] ends a read with when the server sends more than the `size` its stat
    /// gave, which is the remote's lie, not a broken transfer.
    fn body(&self, stream: opendal::FuturesBytesStream, object: String, size: u64) -> BlobStream {
        let remote = self.endpoint.name.clone();
        stream
            .map_err(move |source| {
                if source.to_string().contains(MORE_THAN_ASKED) {
                    RemoteError::TooLarge {
                        object: object.clone(),
                        remote: remote.clone(),
                        limit: size,
                    }
                } else {
                    RemoteError::Transfer {
                        op: "read",
                        object: object.clone(),
                        remote: remote.clone(),
                        source,
                    }
                }
            })
            .boxed()
    }

    /// Open one streamed GET of `path`: `None` when the object is not there, else its body
    /// and the length the response declares (untrusted: the caller bounds what arrives). The
    /// request is sent here, so a miss or a refusal is known before any body is read.
    /// A `file://` remote is stat'ed first instead: a stat costs no round trip there, and a
    /// link to a device must be refused before it is opened.
    async fn open_read(
        &self,
        path: &str,
        object: &str,
    ) -> Result<Option<(opendal::FuturesBytesStream, Option<u64>)>, RemoteError> {
        let not_a_file = || RemoteError::NotAFile {
            object: object.to_string(),
            remote: self.endpoint.name.clone(),
        };
        let known = if self.stat_first {
            let meta = match self.op.stat(path).await {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.backend_error("stat", object.to_string())(e)),
            };
            if !meta.mode().is_file() {
                return Err(not_a_file());
            }
            Some(meta.content_length())
        } else {
            None
        };
        let opened = match self.op.reader_with(path).await {
            Ok(reader) => match known {
                Some(size) => reader.into_bytes_stream(0..size).await,
                None => reader.into_bytes_stream(..).await,
            },
            Err(e) => Err(e),
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            // Removed between the stat and the read (gc on the server): a miss.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.backend_error("open", object.to_string())(e)),
        };
        if known.is_some() {
            return Ok(Some((stream, known)));
        }
        match stream.metadata().await {
            Ok(meta) if meta.mode().is_dir() => Err(not_a_file()),
            // No length (a chunked body) reads as 0: unknown, and the caller's own limit holds.
            Ok(meta) => Ok(Some((
                stream,
                Some(meta.content_length()).filter(|n| *n > 0),
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            // A service that gives no metadata with a read: the body alone is bounded.
            Err(e) if e.kind() == ErrorKind::Unsupported => Ok(Some((stream, None))),
            Err(e) => Err(self.backend_error("read", object.to_string())(e)),
        }
    }
}

/// Unique among this machine's uploads: process id, a counter and the time.
fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{nanos:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn blob_path(d: &Digest) -> String {
    format!("cas/{d}")
}

fn action_path(key: &Digest) -> String {
    format!("ac/{key}.json")
}

impl RemoteBackend for OpendalCache {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn has_blob(&self, digest: Digest, _size: u64) -> RemoteFuture<'_, bool> {
        async move {
            let path = blob_path(&digest);
            self.op
                .exists(&path)
                .await
                .map_err(self.backend_error("check", format!("blob {digest}")))
        }
        .boxed()
    }

    fn read_blob(&self, digest: Digest, size: Option<u64>) -> RemoteFuture<'_, Option<BlobStream>> {
        async move {
            let path = blob_path(&digest);
            let object = format!("blob {digest}");
            // One streamed GET, no HEAD before it: a miss costs the GET's 404, a hit a single
            // request, and the body is handed on as it arrives (memory stays flat). The caller
            // bounds it by the size the entry gives (`bounded.rs`) and verifies it by hash.
            // Ranged reads (4 MiB, 2 in flight) were 30x slower against moto, which copies the
            // object for every range; a HEAD before every GET doubled the requests of a no-op
            // against a remote (benches/RESULTS.md, issue 28).
            let Some((stream, _)) = self.open_read(&path, &object).await? else {
                return Ok(None);
            };
            Ok(Some(self.body(stream, object, size.unwrap_or(u64::MAX))))
        }
        .boxed()
    }

    fn write_blob(&self, digest: Digest, size: u64, mut data: BlobStream) -> RemoteFuture<'_, ()> {
        async move {
            let path = blob_path(&digest);
            let object = format!("blob {digest}");
            if let Some(upload) = &self.webdav {
                return self.write_webdav(upload, digest, size, data).await;
            }
            let mut w = self
                .op
                .writer_with(&path)
                .chunk(PART)
                .concurrent(1)
                .await
                .map_err(self.backend_error("start writing", object.clone()))?;
            while let Some(chunk) = data.next().await {
                let result = match chunk {
                    Ok(bytes) => w
                        .write(bytes)
                        .await
                        .map_err(self.backend_error("write", object.clone())),
                    Err(e) => Err(e),
                };
                if let Err(e) = result {
                    // Nothing becomes visible: an S3 multipart upload is aborted, a WebDAV PUT
                    // or an fs temp file is dropped. A failed abort leaves at most an orphan
                    // upload part, never a wrong blob.
                    let _ = w.abort().await;
                    return Err(e);
                }
            }
            w.close()
                .await
                .map_err(self.backend_error("finish writing", object))?;
            Ok(())
        }
        .boxed()
    }

    fn get_action(&self, key: Digest) -> RemoteFuture<'_, Option<Vec<u8>>> {
        async move {
            let path = action_path(&key);
            let object = format!("action entry {key}");
            // One GET: the size the response declares is checked before its body is read, and
            // what arrives is cut off past it (or past MAX_ENTRY_BYTES when none is declared):
            // a server that declares 769 bytes and sends 2 GiB costs 770.
            let Some((body, declared)) = self.open_read(&path, &object).await? else {
                return Ok(None);
            };
            let size = declared.unwrap_or(MAX_ENTRY_BYTES);
            if size > MAX_ENTRY_BYTES {
                return Err(RemoteError::BadEntry {
                    key,
                    remote: self.endpoint.name.clone(),
                    reason: format!("{size} bytes is too large for an action entry"),
                });
            }
            let body = self.body(body, object.clone(), size);
            let (name, timeouts) = (&self.endpoint.name, self.endpoint.timeouts);
            BoundedBody::new(body, object, name, timeouts, size)
                .collect()
                .await
                .map(Some)
        }
        .boxed()
    }

    fn put_action(&self, key: Digest, bytes: Vec<u8>, _blobs: EntryBlobs) -> RemoteFuture<'_, ()> {
        async move {
            let path = action_path(&key);
            self.op
                .write(&path, Bytes::from(bytes))
                .await
                .map_err(self.backend_error("write", format!("action entry {key}")))?;
            Ok(())
        }
        .boxed()
    }
}

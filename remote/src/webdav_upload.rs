//! [`WebdavUpload`]: a blob's upload to a WebDAV server as one streamed PUT, because
//! OpenDAL's WebDAV writer sends one PUT from one buffer (it would hold a 1 GiB blob in memory).
//!
//! The body goes to `tmp/<digest>.<unique>` and is then moved (WebDAV `MOVE`, through OpenDAL)
//! to `cas/<digest>`: a server that keeps what it received of a broken PUT (Apache's mod_dav
//! may) then keeps it under a temp name, never under the blob's name. A stream that fails
//! (the local file no longer hashes to its digest) aborts the PUT mid-body.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use heddle_cache::Digest;

use crate::backend::{BlobStream, Timeouts};
use crate::http_client::HttpTls;
use crate::RemoteError;

/// Where and how to PUT; built once per backend.
pub(crate) struct WebdavUpload {
    client: reqwest::Client,
    /// `http://host:port/root`, without a trailing slash.
    base: String,
    user: Option<String>,
    password: Option<String>,
    name: String,
    timeouts: Timeouts,
}

impl WebdavUpload {
    pub(crate) fn new(
        endpoint: &str,
        root: &str,
        user: Option<String>,
        password: Option<String>,
        name: String,
        timeouts: Timeouts,
        tls: Option<&HttpTls>,
    ) -> Result<WebdavUpload, RemoteError> {
        crate::crypto::install();
        let builder = reqwest::Client::builder()
            .connect_timeout(timeouts.request)
            .read_timeout(timeouts.idle);
        let client = match tls {
            Some(tls) => tls.client(builder, &name)?,
            None => builder.build().map_err(|source| RemoteError::HttpSetup {
                remote: name.clone(),
                source,
            })?,
        };
        let root = root.trim_matches('/');
        let base = match root {
            "" => endpoint.trim_end_matches('/').to_string(),
            r => format!("{}/{r}", endpoint.trim_end_matches('/')),
        };
        Ok(WebdavUpload {
            client,
            base,
            user,
            password,
            name,
            timeouts,
        })
    }

    /// PUT `data` (`size` bytes) to `tmp_path` (relative to the root). The caller moves it
    /// into place. A stall of the body longer than the idle timeout is a
    /// [`RemoteError::Timeout`]; an error from `data` is returned as it is.
    pub(crate) async fn put(
        &self,
        digest: Digest,
        tmp_path: &str,
        size: u64,
        data: BlobStream,
    ) -> Result<(), RemoteError> {
        let local_error: Arc<Mutex<Option<RemoteError>>> = Arc::default();
        let progress = Arc::new(AtomicU64::new(0));
        let (slot, moved) = (local_error.clone(), progress.clone());
        let body = hold_last_chunk(data).map(move |chunk| match chunk {
            Ok(bytes) => {
                // Counts chunks as well as bytes, so an empty chunk is progress too.
                moved.fetch_add(bytes.len() as u64 + 1, Ordering::Relaxed);
                Ok(bytes)
            }
            Err(e) => {
                *slot.lock().expect("slot poisoned") = Some(e);
                Err(std::io::Error::other("the blob's local stream failed"))
            }
        });
        let mut request = self
            .client
            .put(format!("{}/{tmp_path}", self.base))
            .header(reqwest::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(body));
        if let Some(user) = &self.user {
            request = request.basic_auth(user, self.password.as_ref());
        }
        let sent = watch_idle(request.send(), &progress, self.timeouts.idle).await;
        if let Some(e) = local_error.lock().expect("slot poisoned").take() {
            return Err(e);
        }
        let object = format!("blob {digest}");
        let response = match sent {
            None => return Err(self.timeout(object)),
            Some(Err(e)) if e.is_timeout() => return Err(self.timeout(object)),
            Some(Err(e)) => {
                return Err(RemoteError::Transfer {
                    op: "write",
                    object,
                    remote: self.name.clone(),
                    source: std::io::Error::other(e),
                })
            }
            Some(Ok(r)) => r,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(RemoteError::Transfer {
            op: "write",
            object,
            remote: self.name.clone(),
            source: std::io::Error::other(format!("the server answered {status} to the PUT")),
        })
    }

    fn timeout(&self, object: String) -> RemoteError {
        RemoteError::Timeout {
            op: "write",
            object,
            remote: self.name.clone(),
            secs: self.timeouts.idle.as_secs(),
        }
    }
}

/// `data`, each chunk held back until the next one (or the end) has come. The stream reports
/// a bad hash only when it reaches the end of the file, and with a Content-Length the HTTP
/// client stops polling once it has sent that many bytes: without the hold-back, the last
/// chunk would complete the PUT before the error was seen.
fn hold_last_chunk(data: BlobStream) -> BlobStream {
    futures_util::stream::unfold(
        (data, None::<bytes::Bytes>, false),
        |(mut data, held, done)| async move {
            if done {
                return None;
            }
            let mut held = held;
            loop {
                match data.next().await {
                    Some(Ok(next)) => match held.replace(next) {
                        Some(prev) => return Some((Ok(prev), (data, held, false))),
                        None => continue,
                    },
                    Some(Err(e)) => return Some((Err(e), (data, None, true))),
                    None => return held.map(|last| (Ok(last), (data, None, true))),
                }
            }
        },
    )
    .boxed()
}

/// Run `fut`, giving up (`None`) when `progress` has not moved for `idle`: a server that
/// stops reading the body, or never answers after it, cannot hang the upload.
async fn watch_idle<T>(
    fut: impl std::future::Future<Output = T>,
    progress: &AtomicU64,
    idle: Duration,
) -> Option<T> {
    tokio::pin!(fut);
    let mut seen = progress.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            out = &mut fut => return Some(out),
            _ = tokio::time::sleep(idle) => {
                let now = progress.load(Ordering::Relaxed);
                if now == seen {
                    return None;
                }
                seen = now;
            }
        }
    }
}

//! Large blobs over ByteStream `Read` and `Write`, streamed both ways so memory stays a few
//! chunks whatever the blob's size.

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use heddle_cache::Digest;
use tokio::sync::mpsc;
use tonic::{Code, Status};

use super::call::CallSite;
use super::names::{read_resource, write_resource};
use super::proto::google::bytestream::{
    byte_stream_client::ByteStreamClient, ReadRequest, WriteRequest, WriteResponse,
};
use crate::backend::{BlobStream, Timeouts};
use crate::RemoteError;

/// Bytes per `WriteRequest`: under gRPC's default 4 MiB message limit with room to spare.
const WRITE_CHUNK: usize = 1024 * 1024;
/// Requests queued towards the server: the one being sent and the next one.
const WRITE_QUEUE: usize = 2;

/// Where a ByteStream call goes and how long it may take.
pub(super) struct Target<'a> {
    pub channel: &'a super::connect::Transport,
    pub instance: &'a str,
    pub remote: &'a str,
    pub timeouts: Timeouts,
}

impl<'a> Target<'a> {
    fn site(&self, op: &'static str, object: &'a str) -> CallSite<'a> {
        CallSite {
            op,
            object,
            remote: self.remote,
            timeouts: self.timeouts,
        }
    }
}

/// Open blob `digest` for reading: `Ok(None)` when the server does not have it. The first
/// chunk is awaited here (within the request timeout, retried like any call), so a missing
/// blob is a miss rather than an error mid-stream; the rest arrive as the caller reads, each
/// within the caller's idle timeout (`download.rs`).
pub(super) async fn read(
    target: &Target<'_>,
    digest: Digest,
    size: u64,
) -> Result<Option<BlobStream>, RemoteError> {
    let object = format!("blob {digest}");
    let site = target.site("read", &object);
    let resource = read_resource(target.instance, digest, size);
    let opened = site
        .retrying(|| {
            let mut client = ByteStreamClient::new(target.channel.clone());
            let request = ReadRequest {
                resource_name: resource.clone(),
                read_offset: 0,
                read_limit: 0,
            };
            async move {
                let mut body = client.read(request).await?.into_inner();
                let first = body.message().await?;
                Ok((body, first))
            }
        })
        .await;
    let (body, first) = match opened {
        Ok(opened) => opened,
        Err(RemoteError::Grpc { source, .. }) if source.code() == Code::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let remote = target.remote.to_string();
    let rest = stream::unfold(Some(body), move |body| {
        let object = object.clone();
        let remote = remote.clone();
        async move {
            let mut body = body?;
            match body.message().await {
                Ok(Some(m)) => Some((Ok(m.data), Some(body))),
                Ok(None) => None,
                // The stream is over after an error: nothing more is read from it.
                Err(status) => Some((
                    Err(RemoteError::Grpc {
                        op: "read",
                        object,
                        remote,
                        source: Box::new(status),
                    }),
                    None,
                )),
            }
        }
    });
    let first = stream::iter(first.map(|m| Ok(m.data)));
    Ok(Some(first.chain(rest).boxed()))
}

/// Write blob `digest` of `size` bytes from `data`. The last chunk is held back until `data`
/// has ended cleanly and only then sent with `finish_write`: a stream that ends in an error
/// (the local file no longer hashes to `digest`) cancels the call before the server is told
/// the upload is complete, so nothing is committed. The server verifies the digest itself too.
pub(super) async fn write(
    target: &Target<'_>,
    digest: Digest,
    size: u64,
    data: BlobStream,
) -> Result<(), RemoteError> {
    let object = format!("blob {digest}");
    let site = target.site("write", &object);
    let (tx, rx) = mpsc::channel::<WriteRequest>(WRITE_QUEUE);
    let requests = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut client = ByteStreamClient::new(target.channel.clone());
    let mut call = Box::pin(async move { client.write(requests).await });
    let resource = write_resource(target.instance, digest, size);
    let fed = tokio::select! {
        fed = feed(&tx, data, resource, &site) => fed,
        // The server answered before the last request: an error, or (allowed by the spec) an
        // early success because it already has the blob.
        answer = &mut call => return finish(&site, answer, size),
    };
    if let Err(e) = fed {
        // Cancel the call while the request stream is still open: the server sees a reset
        // stream, never a finished upload.
        drop(call);
        drop(tx);
        return Err(e);
    }
    drop(tx);
    match tokio::time::timeout(target.timeouts.request, call).await {
        Ok(answer) => finish(&site, answer, size),
        Err(_) => Err(site.timeout(target.timeouts.request)),
    }
}

/// Send `data` as `WriteRequest`s of at most [`WRITE_CHUNK`] bytes, the last one with
/// `finish_write`. Returns early (Ok) if the call ended: its answer says how it went.
async fn feed(
    tx: &mpsc::Sender<WriteRequest>,
    mut data: BlobStream,
    resource: String,
    site: &CallSite<'_>,
) -> Result<(), RemoteError> {
    let mut resource = Some(resource);
    let mut offset = 0i64;
    let mut held: Option<Bytes> = None;
    let idle = site.timeouts.idle;
    let mut send = move |chunk: Bytes, finish_write: bool| {
        let request = WriteRequest {
            // The resource name goes in the first request only.
            resource_name: resource.take().unwrap_or_default(),
            write_offset: offset,
            finish_write,
            data: chunk,
        };
        offset += request.data.len() as i64;
        async move {
            match tokio::time::timeout(idle, tx.send(request)).await {
                Ok(Ok(())) => Ok(true),
                // The call ended and dropped its receiver.
                Ok(Err(_)) => Ok(false),
                Err(_) => Err(site.timeout(idle)),
            }
        }
    };
    while let Some(chunk) = data.next().await {
        let mut chunk = chunk?;
        while !chunk.is_empty() {
            let piece = chunk.split_to(chunk.len().min(WRITE_CHUNK));
            if let Some(previous) = held.replace(piece) {
                if !send(previous, false).await? {
                    return Ok(());
                }
            }
        }
    }
    send(held.unwrap_or_default(), true).await?;
    Ok(())
}

fn finish(
    site: &CallSite<'_>,
    answer: Result<tonic::Response<WriteResponse>, Status>,
    size: u64,
) -> Result<(), RemoteError> {
    let committed = answer
        .map_err(|s| site.error(s))?
        .into_inner()
        .committed_size;
    if committed != size as i64 {
        return Err(site.error(Status::data_loss(format!(
            "the server committed {committed} of {size} bytes"
        ))));
    }
    Ok(())
}

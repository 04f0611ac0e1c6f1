//! [`ReadBatches`]: small-blob reads of many actions coalesced into few `BatchReadBlobs` calls.
//!
//! A cold no-op against a shared cache reads one entry and one or a few small blobs per
//! instance, and the scheduler has a few hundred instances looking up at once. One
//! `BatchReadBlobs` per blob pays a round trip (and the server's per-call cost) per blob; here
//! each read joins a queue, and at most [`FLIGHTS`] calls are in flight, each taking whatever
//! has queued up (at most [`MAX_BLOBS`] blobs, [`MAX_BYTES`] bytes). The first read of an idle
//! run goes out alone, at once: nothing waits for a batch to fill. Reads that arrive while the
//! flights are busy ride together on the next one, so batching grows with the load.
//!
//! Nothing is verified here: the bytes go back to `download.rs`, which hashes them. A blob the
//! server lacks is `None` for its reader only; a call that fails fails every read it carried,
//! each with the call's error, so the run's degradation policy sees what it would have seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use heddle_cache::Digest;
use tokio::sync::{oneshot, Semaphore};
use tonic::{Code, Status};

use super::call::CallSite;
use super::connect::Transport;
use super::names::reapi_digest;
use super::proto::build::bazel::remote::execution::v2 as re;
use super::proto::build::bazel::remote::execution::v2::content_addressable_storage_client::ContentAddressableStorageClient;
use crate::backend::Timeouts;
use crate::RemoteError;

/// Calls in flight at once: enough to keep a link busy while a batch is being answered.
const FLIGHTS: usize = 4;
/// Blobs per call. Servers bound a request's digests (BuildGrid: 10,000 by default).
const MAX_BLOBS: usize = 500;
/// Bytes per call, under gRPC's default 4 MiB message limit with room for the framing of
/// every response. A single blob of up to `BATCH_MAX` always goes, alone if it must.
const MAX_BYTES: u64 = 3 * 1024 * 1024;

/// What a read gets back: the bytes, `None` when the server lacks the blob, or the error.
type Answer = Result<Option<Bytes>, RemoteError>;

struct Wanted {
    digest: Digest,
    size: u64,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Wanted>,
    flights: usize,
}

/// The queue of small-blob reads and what a call needs.
pub(super) struct ReadBatches {
    queue: Mutex<Queue>,
    channel: Transport,
    instance: String,
    remote: String,
    timeouts: Timeouts,
    /// The backend's permits for read calls in flight (`CALLS_IN_FLIGHT` in mod.rs).
    calls: Arc<Semaphore>,
}

impl ReadBatches {
    pub fn new(
        channel: Transport,
        instance: String,
        remote: String,
        timeouts: Timeouts,
        calls: Arc<Semaphore>,
    ) -> Self {
        ReadBatches {
            queue: Mutex::default(),
            channel,
            instance,
            remote,
            timeouts,
            calls,
        }
    }

    /// Blob `digest` of `size` bytes (at most `BATCH_MAX`), read in whichever call takes it.
    pub async fn read(self: &Arc<Self>, digest: Digest, size: u64) -> Answer {
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut q = self.queue.lock().expect("read queue");
            q.waiting.push(Wanted {
                digest,
                size,
                answer,
            });
            let start = q.flights < FLIGHTS;
            if start {
                q.flights += 1;
            }
            start
        };
        if start {
            // A task of its own: a reader that gives up (its timeout) must not strand the
            // reads that joined its call.
            tokio::spawn(self.clone().fly());
        }
        match answered.await {
            Ok(answer) => answer,
            // The flight's task ended without answering (a panic): say so as a failed call.
            Err(_) => Err(self
                .site("read", &format!("blob {digest}"))
                .error(Status::internal("the batched read ended without an answer"))),
        }
    }

    /// Send what has queued up, call after call, until the queue is empty.
    async fn fly(self: Arc<Self>) {
        loop {
            let batch = {
                let mut q = self.queue.lock().expect("read queue");
                let batch = take_batch(&mut q.waiting);
                if batch.is_empty() {
                    q.flights -= 1;
                    return;
                }
                batch
            };
            self.send(batch).await;
        }
    }

    async fn send(&self, batch: Vec<Wanted>) {
        let object = match batch.as_slice() {
            [one] => format!("blob {}", one.digest),
            more => format!("{} blobs", more.len()),
        };
        let site = self.site("read", &object);
        let message = re::BatchReadBlobsRequest {
            instance_name: self.instance.clone(),
            digests: batch
                .iter()
                .map(|w| reapi_digest(w.digest, w.size))
                .collect(),
            acceptable_compressors: Vec::new(),
            digest_function: re::digest_function::Value::Sha256 as i32,
        };
        let cas = ContentAddressableStorageClient::new(self.channel.clone());
        let call = self.calls.acquire().await.expect("never closed");
        let answer = site
            .unary(cas, message, |mut cas, r| async move {
                cas.batch_read_blobs(r).await
            })
            .await;
        drop(call);
        let responses = match answer {
            Ok(answer) => answer.responses,
            Err(e) => {
                for w in batch {
                    let _ = w.answer.send(Err(same_error(&e, w.digest, &self.remote)));
                }
                return;
            }
        };
        // By digest: a blob two readers asked for answers both.
        let mut answers: HashMap<Digest, Result<Option<Bytes>, Status>> =
            HashMap::with_capacity(responses.len());
        for r in responses {
            let Some(hash) = r.digest.as_ref().and_then(|d| d.hash.parse().ok()) else {
                continue;
            };
            let answer = match r.status.map(|s| (Code::from(s.code), s.message)) {
                None | Some((Code::Ok, _)) => Ok(Some(r.data)),
                Some((Code::NotFound, _)) => Ok(None),
                Some((code, message)) => Err(Status::new(code, message)),
            };
            answers.insert(hash, answer);
        }
        for w in batch {
            let object = format!("blob {}", w.digest);
            let site = self.site("read", &object);
            let answer = match answers.get(&w.digest) {
                Some(Ok(data)) => Ok(data.clone()),
                Some(Err(status)) => Err(site.error(status.clone())),
                None => Err(site.error(Status::internal("the server's answer left out this blob"))),
            };
            let _ = w.answer.send(answer);
        }
    }

    fn site<'a>(&'a self, op: &'static str, object: &'a str) -> CallSite<'a> {
        CallSite {
            op,
            object,
            remote: &self.remote,
            timeouts: self.timeouts,
        }
    }
}

/// The oldest reads that fit one call: up to [`MAX_BLOBS`] and [`MAX_BYTES`], always at least
/// one. A digest asked for twice goes once and answers both (`send` matches by digest).
fn take_batch(waiting: &mut Vec<Wanted>) -> Vec<Wanted> {
    let mut bytes = 0u64;
    let mut n = 0;
    for w in waiting.iter() {
        if n == MAX_BLOBS || (n > 0 && bytes + w.size > MAX_BYTES) {
            break;
        }
        bytes += w.size;
        n += 1;
    }
    waiting.drain(..n).collect()
}

/// The error of a call, for one of the reads it carried (the error is not `Clone`; what it
/// says is).
fn same_error(e: &RemoteError, digest: Digest, remote: &str) -> RemoteError {
    match e {
        RemoteError::Grpc {
            op, remote, source, ..
        } => RemoteError::Grpc {
            op,
            object: format!("blob {digest}"),
            remote: remote.clone(),
            source: source.clone(),
        },
        RemoteError::Timeout {
            op, remote, secs, ..
        } => RemoteError::Timeout {
            op,
            object: format!("blob {digest}"),
            remote: remote.clone(),
            secs: *secs,
        },
        // A call fails with one of the two above (call.rs); anything else keeps its words.
        other => RemoteError::Grpc {
            op: "read",
            object: format!("blob {digest}"),
            remote: remote.to_string(),
            source: Box::new(Status::unknown(other.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(size: u64) -> Wanted {
        Wanted {
            digest: Digest::of_bytes(&size.to_le_bytes()),
            size,
            answer: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_takes_the_oldest_reads_that_fit_and_never_none() {
        let mut q: Vec<Wanted> = (0..MAX_BLOBS as u64 + 10).map(|_| wanted(1)).collect();
        assert_eq!(take_batch(&mut q).len(), MAX_BLOBS);
        assert_eq!(q.len(), 10);

        let mut q = vec![wanted(MAX_BYTES - 1), wanted(2), wanted(1)];
        assert_eq!(take_batch(&mut q).len(), 1);
        assert_eq!(take_batch(&mut q).len(), 2);
        assert!(take_batch(&mut q).is_empty());

        // A blob larger than a batch's bytes still goes, alone.
        let mut q = vec![wanted(MAX_BYTES + 1), wanted(1)];
        assert_eq!(take_batch(&mut q).len(), 1);
        assert_eq!(q.len(), 1);
    }
}

//! [`BoundedBody`]: every body a remote sends (an action entry, a tree manifest, a blob) is read
//! under limits enforced on the bytes that *arrive*, never on a size the remote declared:
//!
//! - **Size.** At most `limit` bytes: the size the entry gives a blob, or the most an entry or a
//!   manifest heddle writes can be. The read stops at the first byte past it, so a server whose
//!   HEAD says 769 B and whose GET sends 2 GiB, or a `file://` entry linked to `/dev/zero`,
//!   costs `limit + 1` bytes and one warning.
//! - **Pace.** After a grace of [`Timeouts::request`] (the time a whole small request may
//!   take), a body must have arrived at [`Timeouts::min_rate`] bytes per second on average:
//!   by `grace + received / min_rate`. A server that trickles one byte every 10 s resets the
//!   per-chunk idle timeout forever; this deadline does not move with it, so such a blob ends
//!   after the grace. A 1 GiB blob at the 1 MiB/s floor has 17 minutes.
//!
//! Both are typed errors: [`RemoteError::TooLarge`] (bad data: a miss with one warning) and
//! [`RemoteError::TooSlow`] (the remote is of no use to this run, as if it were down).

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::backend::{BlobStream, Timeouts};
use crate::RemoteError;

/// A body being read under a size limit and the pace floor.
pub(crate) struct BoundedBody {
    body: BlobStream,
    /// What is being read and from where, for messages: `blob <hex>`, `action entry <hex>`.
    object: String,
    remote: String,
    limit: u64,
    received: u64,
    started: Instant,
    timeouts: Timeouts,
}

impl BoundedBody {
    /// Start reading `body` (already opened: the clock starts now). `limit` is the most bytes
    /// the object may have.
    pub(crate) fn new(
        body: BlobStream,
        object: String,
        remote: &str,
        timeouts: Timeouts,
        limit: u64,
    ) -> BoundedBody {
        BoundedBody {
            body,
            object,
            remote: remote.to_string(),
            limit,
            received: 0,
            started: Instant::now(),
            timeouts,
        }
    }

    /// Bytes received so far.
    #[cfg(test)]
    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    /// The latest moment the next chunk may arrive at, by the pace floor.
    fn pace_deadline(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.received as f64 / self.timeouts.min_rate as f64);
        self.started + self.timeouts.request + earned
    }

    /// The next chunk, `None` at the end. Errors: the idle timeout between chunks
    /// ([`RemoteError::Timeout`]), the pace floor ([`RemoteError::TooSlow`]), the size limit
    /// ([`RemoteError::TooLarge`]), or the body's own.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, RemoteError> {
        let pace = self.pace_deadline();
        let idle = Instant::now() + self.timeouts.idle;
        let next = tokio::time::timeout_at(pace.min(idle), self.body.next()).await;
        let chunk = match next {
            Ok(None) => return Ok(None),
            Ok(Some(chunk)) => chunk?,
            Err(_) if pace <= idle => {
                return Err(RemoteError::TooSlow {
                    object: self.object.clone(),
                    remote: self.remote.clone(),
                    bytes: self.received,
                    secs: self.started.elapsed().as_secs(),
                    floor_kib: self.timeouts.min_rate / 1024,
                })
            }
            Err(_) => {
                return Err(RemoteError::Timeout {
                    op: "read",
                    object: self.object.clone(),
                    remote: self.remote.clone(),
                    secs: self.timeouts.idle.as_secs(),
                })
            }
        };
        self.received += chunk.len() as u64;
        if self.received > self.limit {
            return Err(RemoteError::TooLarge {
                object: self.object.clone(),
                remote: self.remote.clone(),
                limit: self.limit,
            });
        }
        Ok(Some(chunk))
    }

    /// The whole body in memory (an entry, a manifest: `limit` keeps it small).
    pub(crate) async fn collect(mut self) -> Result<Vec<u8>, RemoteError> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next().await? {
            all.extend_from_slice(&chunk);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn timeouts() -> Timeouts {
        Timeouts {
            request: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            retries: 0,
            min_rate: 1024,
        }
    }

    #[tokio::test]
    async fn more_bytes_than_the_limit_stop_the_read_at_the_first_chunk_past_it() {
        // An endless body: the read must end on its own.
        let endless = stream::repeat_with(|| Ok(Bytes::from_static(&[0u8; 512]))).boxed();
        let mut body = BoundedBody::new(endless, "blob x".into(), "r", timeouts(), 769);
        assert_eq!(body.next().await.unwrap().unwrap().len(), 512);
        let err = body.next().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to read blob x from remote cache r: it sent more than 769 bytes"
        );
        assert_eq!(body.received(), 1024);
    }

    #[tokio::test]
    async fn a_trickle_that_keeps_the_idle_timeout_alive_still_ends_at_the_pace_floor() {
        // One byte at once, then one every 10 s: never idle for the 60 s idle timeout, and
        // far under the floor once the grace (here 200 ms) is over.
        let trickle = stream::unfold(0u32, |n| async move {
            if n > 0 {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Some((Ok(Bytes::from_static(b"x")), n + 1))
        })
        .boxed();
        let t = Timeouts {
            request: Duration::from_millis(200),
            ..timeouts()
        };
        let body = BoundedBody::new(trickle, "blob y".into(), "r", t, 39);
        let err = body.collect().await.unwrap_err();
        assert!(
            matches!(err, RemoteError::TooSlow { bytes: 1, .. }),
            "{err:?}"
        );
        assert!(err.is_unavailable());
        assert_eq!(
            err.to_string(),
            "failed to read blob y from remote cache r: 1 bytes in 0 s, under the floor of 1 KiB/s"
        );
    }
}

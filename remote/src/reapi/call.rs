//! Deadlines, retries and error mapping shared by every REAPI call, so a server that is down
//! or stalls costs at most [`Timeouts::request_budget`] per call, as with the other backends.

use std::future::Future;
use std::time::Duration;

use tonic::{Code, Status};

use crate::backend::{Timeouts, RETRY_MAX_DELAY, RETRY_MIN_DELAY};
use crate::RemoteError;

/// What a failing call was doing, for its error message.
pub(super) struct CallSite<'a> {
    pub op: &'static str,
    pub object: &'a str,
    pub remote: &'a str,
    pub timeouts: Timeouts,
}

impl CallSite<'_> {
    pub fn error(&self, source: Status) -> RemoteError {
        RemoteError::Grpc {
            op: self.op,
            object: self.object.to_string(),
            remote: self.remote.to_string(),
            source: Box::new(source),
        }
    }

    pub fn timeout(&self, limit: Duration) -> RemoteError {
        RemoteError::Timeout {
            op: self.op,
            object: self.object.to_string(),
            remote: self.remote.to_string(),
            secs: limit.as_secs(),
        }
    }

    /// Run `attempt` (one request, built afresh each time) with the request timeout on each
    /// attempt, retrying codes that say "try again" with jittered exponential backoff. The
    /// deadline is also sent to the server (`grpc-timeout`) by the caller's request.
    pub async fn retrying<T, F, Fut>(&self, mut attempt: F) -> Result<T, RemoteError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let limit = self.timeouts.request;
        let mut delay = RETRY_MIN_DELAY;
        let mut tries = 0;
        loop {
            let (failure, busy) = match tokio::time::timeout(limit, attempt()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(status)) if !is_transient(status.code()) => return Err(self.error(status)),
                Ok(Err(status)) => {
                    let busy = status.code() == Code::ResourceExhausted;
                    (self.error(status), busy)
                }
                Err(_) => (self.timeout(limit), false),
            };
            let allowed = match busy {
                true => self.timeouts.retries.max(BUSY_RETRIES),
                false => self.timeouts.retries,
            };
            if tries >= allowed {
                return Err(failure);
            }
            tries += 1;
            tokio::time::sleep(jittered(delay)).await;
            delay = (delay * 2).min(RETRY_MAX_DELAY);
        }
    }

    /// One unary call, [`retrying`](CallSite::retrying): each attempt sends `message` with the
    /// deadline through `send`, on its own clone of `client`. The server's answer.
    pub async fn unary<C, M, T, Fut>(
        &self,
        client: C,
        message: M,
        send: impl Fn(C, tonic::Request<M>) -> Fut,
    ) -> Result<T, RemoteError>
    where
        C: Clone,
        M: Clone,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let answer = self
            .retrying(|| send(client.clone(), request(message.clone(), self.timeouts)))
            .await?;
        Ok(answer.into_inner())
    }
}

/// How many times in all a call refused with `RESOURCE_EXHAUSTED` is tried, at least: the
/// server answered at once and asked to be called again later (its pool of calls is full:
/// BuildGrid's "Concurrent RPC limit exceeded!"), which is not the remote being down. Three
/// quick retries (~0.7 s) were not enough for BuildGrid on a loaded 2-core machine in CI
/// (2026-12-07), and the refusal turned the remote off for the run; ten wait ~6 s in all.
const BUSY_RETRIES: usize = 10;

/// A request carrying the deadline to the server too, so it can drop work nobody waits for.
fn request<T>(message: T, timeouts: Timeouts) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeouts.request);
    r
}

/// Codes worth another attempt: the server was unreachable, overloaded or gave up on time.
/// tonic reports a refused or reset connection as `Unavailable`.
fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::ResourceExhausted | Code::Aborted | Code::DeadlineExceeded
    )
}

/// Codes after which every later call would fail the same way (no server, a broken
/// connection, a server without these services, credentials refused): the run stops asking
/// this remote ([`RemoteError::is_unavailable`]). The others (`NotFound`, `InvalidArgument`,
/// `DataLoss`, ...) are answers about one object.
pub(crate) fn is_unavailable_code(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::Internal
            | Code::Unimplemented
            | Code::Unauthenticated
            | Code::PermissionDenied
    )
}

/// `delay` scaled by a factor in [0.5, 1.5), from the clock's nanoseconds: writers that
/// collided do not retry in lockstep. No randomness crate needed for that.
fn jittered(delay: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    delay.mul_f64(0.5 + f64::from(nanos % 1000) / 1000.0)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn site() -> CallSite<'static> {
        CallSite {
            op: "read action entry",
            object: "k",
            remote: "grpc://127.0.0.1:1",
            timeouts: Timeouts::default(),
        }
    }

    /// Calls `retrying` with an attempt that fails `fails` times with `code`, then answers;
    /// what it returned and how many attempts it made.
    async fn fail_then_answer(code: Code, fails: usize) -> (Result<u8, RemoteError>, usize) {
        let attempts = AtomicUsize::new(0);
        let got = site()
            .retrying(|| {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                async move {
                    match n < fails {
                        true => Err(Status::new(code, "no")),
                        false => Ok(7),
                    }
                }
            })
            .await;
        (got, attempts.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_busy_server_is_asked_again_past_the_usual_retries() {
        let (got, attempts) = fail_then_answer(Code::ResourceExhausted, 6).await;
        assert_eq!((got.ok(), attempts), (Some(7), 7));
    }

    #[tokio::test]
    async fn a_busy_server_that_stays_busy_is_an_error_after_the_busy_retries() {
        let (got, attempts) = fail_then_answer(Code::ResourceExhausted, usize::MAX).await;
        assert!(got.unwrap_err().is_unavailable());
        assert_eq!(attempts, BUSY_RETRIES + 1);
    }

    #[tokio::test]
    async fn an_unreachable_server_costs_the_usual_retries_only() {
        let (got, attempts) = fail_then_answer(Code::Unavailable, usize::MAX).await;
        assert!(got.unwrap_err().is_unavailable());
        assert_eq!(attempts, Timeouts::default().retries + 1);
    }

    #[tokio::test]
    async fn an_answer_about_the_object_is_not_retried() {
        let (got, attempts) = fail_then_answer(Code::NotFound, usize::MAX).await;
        assert!(!got.unwrap_err().is_unavailable());
        assert_eq!(attempts, 1);
    }
}

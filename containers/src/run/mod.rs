//! Running one container to completion: create, attach, start, wait, remove — on every path.
//!
//! The steps are here; the parts they use each have a file:
//! - `body`: a [`ContainerSpec`] as the engine's create request;
//! - `logs`: the attached output, written to the log files and cut into lines;
//! - `guard`: the removal that happens however the run ends, even when its future is dropped.

use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, StopContainerOptions,
    WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::error::ContainerError;
use crate::spec::{ContainerOutcome, ContainerSpec, LogLine};

mod body;
mod guard;
mod logs;

use body::create_body;
pub(crate) use guard::{AbortOnDrop, RemovalGuard};
use logs::{pump_logs, LogFiles};

/// After the container exits its output stream ends by itself; this only bounds a stuck pump.
const LOG_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

impl Engine {
    /// Run one container to completion.
    ///
    /// Output is attached before the container starts, so nothing is lost; every chunk is
    /// written to `spec.stdout_log` / `spec.stderr_log` as it arrives and each line is also sent
    /// on `lines`. On `spec.timeout` or when `cancel` fires the container is stopped (SIGTERM,
    /// then SIGKILL after `spec.stop_grace`). The container is force-removed on every path; if
    /// this future is dropped before it finishes, a drop guard spawns the removal (the one
    /// window it cannot cover is a drop while the create request itself is in flight;
    /// [`Engine::remove_labelled`] is the backstop for that and for crashes).
    ///
    /// The container runs with the engine's init (`docker run --init`) as PID 1, so `sh -c`
    /// scripts get SIGTERM on stop and zombies are reaped. A command that cannot be executed
    /// is therefore `Exited { code: 127 }` with the init's reason on stderr, not a start error.
    /// OOM is read from the container's state only for a nonzero exit.
    pub async fn run(
        &self,
        spec: &ContainerSpec,
        lines: Option<UnboundedSender<LogLine>>,
        cancel: CancellationToken,
    ) -> Result<ContainerOutcome, ContainerError> {
        let body = create_body(spec)?;
        let logs = LogFiles::new(&spec.stdout_log, &spec.stderr_log, &spec.mask);
        if cancel.is_cancelled() {
            return Ok(ContainerOutcome::Cancelled);
        }
        let options = CreateContainerOptions {
            name: spec.name.clone(),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|source| ContainerError::Create {
                image: spec.image.clone(),
                source,
            })?;
        let mut guard = RemovalGuard {
            docker: self.docker.clone(),
            id: Some(created.id.clone()),
        };
        let container = Container {
            docker: &self.docker,
            id: &created.id,
            display: spec
                .name
                .clone()
                .unwrap_or_else(|| short_id(&created.id).to_string()),
        };
        let outcome = async {
            if !spec.copy_in.is_empty() {
                self.copy_in(&created.id, &spec.copy_in).await?;
            }
            let outcome = container.drive(spec, logs, lines, cancel).await?;
            if !matches!(outcome, ContainerOutcome::Cancelled) {
                for c in &spec.copy_out {
                    self.copy_out(&created.id, c).await?;
                }
            }
            Ok(outcome)
        }
        .await;
        let removed = guard.remove_now().await;
        let outcome = outcome?;
        removed?;
        Ok(outcome)
    }
}

struct Container<'a> {
    docker: &'a Docker,
    id: &'a str,
    /// The name, or the short id: what messages call it.
    display: String,
}

impl Container<'_> {
    async fn drive(
        &self,
        spec: &ContainerSpec,
        logs: LogFiles,
        lines: Option<UnboundedSender<LogLine>>,
        cancel: CancellationToken,
    ) -> Result<ContainerOutcome, ContainerError> {
        let attach = self
            .docker
            .attach_container(
                self.id,
                Some(AttachContainerOptions {
                    stream: true,
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(|source| self.logs_error(source))?;
        let display = self.display.clone();
        let mut pump = AbortOnDrop(tokio::spawn(pump_logs(attach.output, logs, lines, display)));

        self.docker
            .start_container(self.id, None)
            .await
            .map_err(|source| ContainerError::Start {
                container: self.display.clone(),
                source,
            })?;

        let deadline = async {
            match spec.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            // Cancellation wins ties: the user asked to stop.
            biased;
            _ = cancel.cancelled() => {
                self.stop(spec.stop_grace).await;
                ContainerOutcome::Cancelled
            }
            _ = deadline => {
                self.stop(spec.stop_grace).await;
                ContainerOutcome::TimedOut
            }
            code = self.wait() => {
                let code = code?;
                // The OOM flag needs an inspect; a clean exit cannot have been OOM-killed, so
                // the common path skips the round trip.
                if code != 0 && self.oom_killed(code).await? {
                    ContainerOutcome::OomKilled { code }
                } else {
                    ContainerOutcome::Exited { code }
                }
            }
        };

        // The attach stream ends once the container has exited; wait for the tail of the
        // output to be written before reporting.
        match tokio::time::timeout(LOG_DRAIN_TIMEOUT, &mut pump.0).await {
            Ok(Ok(result)) => result?,
            Ok(Err(join)) => {
                if join.is_panic() {
                    std::panic::resume_unwind(join.into_panic());
                }
            }
            Err(_) => tracing::warn!(
                container = %self.display,
                "output of the container did not end within {}s of its exit; logs may be cut short",
                LOG_DRAIN_TIMEOUT.as_secs()
            ),
        }
        Ok(outcome)
    }

    async fn wait(&self) -> Result<i64, ContainerError> {
        let mut stream = self.docker.wait_container(
            self.id,
            Some(WaitContainerOptions {
                condition: "not-running".to_string(),
            }),
        );
        match stream.next().await {
            Some(Ok(response)) => Ok(response.status_code),
            // bollard reports a nonzero exit as an error; for us it is an outcome.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(source)) => Err(ContainerError::Wait {
                container: self.display.clone(),
                source,
            }),
            None => Err(ContainerError::Wait {
                container: self.display.clone(),
                source: BollardError::DockerStreamError {
                    error: "the engine closed the wait stream without an exit code".to_string(),
                },
            }),
        }
    }

    /// Whether the engine marked the container OOM-killed. The daemon sets the flag when the
    /// runtime's OOM event arrives, which under load can come after the exit itself (more than
    /// a second after it on a loaded 2-core CI machine): a SIGKILL exit (137) is asked again
    /// for up to five seconds before it is called a plain exit. Only a 137 waits.
    async fn oom_killed(&self, code: i64) -> Result<bool, ContainerError> {
        let tries = if code == 137 { 50 } else { 1 };
        for attempt in 0..tries {
            if attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let inspect = self
                .docker
                .inspect_container(self.id, None::<InspectContainerOptions>)
                .await
                .map_err(|source| ContainerError::Inspect {
                    container: self.display.clone(),
                    source,
                })?;
            if inspect.state.and_then(|s| s.oom_killed).unwrap_or(false) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `docker stop`: SIGTERM, SIGKILL after `grace`. Failures are logged, not returned: the
    /// force-removal that follows kills whatever is left.
    async fn stop(&self, grace: Duration) {
        let t = i32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0))
            .unwrap_or(i32::MAX);
        let options = StopContainerOptions {
            t: Some(t),
            ..Default::default()
        };
        match self.docker.stop_container(self.id, Some(options)).await {
            Ok(()) => {}
            // 304: already stopped.
            Err(BollardError::DockerResponseServerError {
                status_code: 304, ..
            }) => {}
            Err(e) => tracing::warn!(container = %self.display, "failed to stop container: {e}"),
        }
    }

    fn logs_error(&self, source: BollardError) -> ContainerError {
        ContainerError::Logs {
            container: self.display.clone(),
            source,
        }
    }
}

/// The first 12 characters of a container id, as `docker ps` shows it.
fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

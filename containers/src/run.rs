//! Running one container to completion: create, attach, start, wait, remove — on every path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, DeviceMapping as EngineDevice, DeviceRequest, HostConfig,
    Mount as EngineMount, MountType,
};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, StopContainerOptions,
    WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::engine::{force_remove, is_conflict, is_not_found, Engine, MANAGED_LABEL};
use crate::error::ContainerError;
use crate::spec::{parse_device, ContainerOutcome, ContainerSpec, GpuRequest, LogLine, Stream};

/// After the container exits its output stream ends by itself; this only bounds a stuck pump.
const LOG_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A line longer than this is passed on in pieces (the log files always get every byte).
const MAX_LINE: usize = 64 * 1024;

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
        let logs = LogFiles::create(&spec.stdout_log, &spec.stderr_log).await?;
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
                if code != 0 && self.oom_killed().await? {
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

    async fn oom_killed(&self) -> Result<bool, ContainerError> {
        let inspect = self
            .docker
            .inspect_container(self.id, None::<InspectContainerOptions>)
            .await
            .map_err(|source| ContainerError::Inspect {
                container: self.display.clone(),
                source,
            })?;
        Ok(inspect.state.and_then(|s| s.oom_killed).unwrap_or(false))
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

/// Force-removes the container when dropped unless `remove_now` already did. Covers the
/// future being dropped mid-run (a `select!` elsewhere, a panic, a runtime shutting down a
/// task): the container must not outlive the run.
struct RemovalGuard {
    docker: Docker,
    id: Option<String>,
}

impl RemovalGuard {
    async fn remove_now(&mut self) -> Result<(), ContainerError> {
        let Some(id) = self.id.take() else {
            return Ok(());
        };
        match self
            .docker
            .remove_container(&id, Some(force_remove()))
            .await
        {
            Ok(()) => Ok(()),
            // Already gone, or someone (`heddle gc`) is removing it right now.
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(source) => Err(ContainerError::Remove {
                container: short_id(&id).to_string(),
                source,
            }),
        }
    }
}

impl Drop for RemovalGuard {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let docker = self.docker.clone();
        let remove = async move {
            if let Err(e) = docker.remove_container(&id, Some(force_remove())).await {
                if !is_not_found(&e) {
                    tracing::warn!(container = %short_id(&id), "failed to remove container: {e}");
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(remove);
            }
            // Dropped outside a runtime: a short-lived one on its own thread does the job.
            Err(_) => {
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        rt.block_on(remove);
                    }
                });
            }
        }
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct LogFiles {
    stdout: tokio::fs::File,
    stdout_path: PathBuf,
    stderr: tokio::fs::File,
    stderr_path: PathBuf,
}

impl LogFiles {
    async fn create(stdout: &Path, stderr: &Path) -> Result<LogFiles, ContainerError> {
        async fn open(path: &Path) -> Result<tokio::fs::File, ContainerError> {
            let io = |source| ContainerError::Io {
                path: path.to_path_buf(),
                source,
            };
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            tokio::fs::File::create(path).await.map_err(io)
        }
        Ok(LogFiles {
            stdout: open(stdout).await?,
            stdout_path: stdout.to_path_buf(),
            stderr: open(stderr).await?,
            stderr_path: stderr.to_path_buf(),
        })
    }
}

async fn pump_logs(
    mut output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, BollardError>> + Send>,
    >,
    mut files: LogFiles,
    lines: Option<UnboundedSender<LogLine>>,
    container: String,
) -> Result<(), ContainerError> {
    let mut out_lines = LineSplitter::new(Stream::Stdout);
    let mut err_lines = LineSplitter::new(Stream::Stderr);
    let mut send = |line: LogLine| {
        if let Some(tx) = &lines {
            // A receiver that went away only means nobody is watching.
            let _ = tx.send(line);
        }
    };
    while let Some(chunk) = output.next().await {
        let chunk = chunk.map_err(|source| ContainerError::Logs {
            container: container.clone(),
            source,
        })?;
        let (file, path, splitter, bytes) = match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (
                &mut files.stdout,
                &files.stdout_path,
                &mut out_lines,
                message,
            ),
            LogOutput::StdErr { message } => (
                &mut files.stderr,
                &files.stderr_path,
                &mut err_lines,
                message,
            ),
            LogOutput::StdIn { .. } => continue,
        };
        file.write_all(&bytes)
            .await
            .map_err(|source| ContainerError::Io {
                path: path.clone(),
                source,
            })?;
        splitter.push(&bytes, &mut send);
    }
    out_lines.finish(&mut send);
    err_lines.finish(&mut send);
    for (file, path) in [
        (&mut files.stdout, &files.stdout_path),
        (&mut files.stderr, &files.stderr_path),
    ] {
        file.flush().await.map_err(|source| ContainerError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Cuts a byte stream into lines. `\n`, `\r\n` and a lone `\r` (progress bars redrawing a
/// line) all end a line.
struct LineSplitter {
    stream: Stream,
    buf: Vec<u8>,
    after_cr: bool,
}

impl LineSplitter {
    fn new(stream: Stream) -> Self {
        LineSplitter {
            stream,
            buf: Vec::new(),
            after_cr: false,
        }
    }

    fn push(&mut self, bytes: &[u8], emit: &mut impl FnMut(LogLine)) {
        for &b in bytes {
            match b {
                b'\n' => {
                    if !(self.after_cr && self.buf.is_empty()) {
                        self.emit(emit);
                    }
                    self.after_cr = false;
                }
                b'\r' => {
                    self.emit(emit);
                    self.after_cr = true;
                }
                _ => {
                    self.after_cr = false;
                    self.buf.push(b);
                    if self.buf.len() >= MAX_LINE {
                        self.emit(emit);
                    }
                }
            }
        }
    }

    fn finish(&mut self, emit: &mut impl FnMut(LogLine)) {
        if !self.buf.is_empty() {
            self.emit(emit);
        }
    }

    fn emit(&mut self, emit: &mut impl FnMut(LogLine)) {
        let line = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        emit(LogLine {
            stream: self.stream,
            line,
        });
    }
}

fn create_body(spec: &ContainerSpec) -> Result<ContainerCreateBody, ContainerError> {
    let invalid = |reason: String| ContainerError::InvalidSpec {
        image: spec.image.clone(),
        reason,
    };
    if spec.image.is_empty() {
        return Err(invalid("no image given".to_string()));
    }
    let mut labels: HashMap<String, String> = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(MANAGED_LABEL.0.to_string(), MANAGED_LABEL.1.to_string());

    let mounts = spec
        .mounts
        .iter()
        .map(|m| EngineMount {
            target: Some(m.container.clone()),
            source: Some(m.host.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect::<Vec<_>>();

    let devices = spec
        .devices
        .iter()
        .map(|d| {
            parse_device(d).map(|d| EngineDevice {
                path_on_host: Some(d.host),
                path_in_container: Some(d.container),
                cgroup_permissions: Some(d.permissions),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;

    // `docker run --gpus` semantics: no driver (the engine picks the one that offers the
    // "gpu" capability), count -1 for all.
    let gpu_request = |count: Option<i64>, ids: Option<Vec<String>>| DeviceRequest {
        driver: Some(String::new()),
        count,
        device_ids: ids,
        capabilities: Some(vec![vec!["gpu".to_string()]]),
        options: None,
    };
    let device_requests = match &spec.gpus {
        GpuRequest::None => None,
        GpuRequest::All => Some(vec![gpu_request(Some(-1), None)]),
        GpuRequest::Count(n) => Some(vec![gpu_request(Some(i64::from(*n)), None)]),
        GpuRequest::Ids(ids) => Some(vec![gpu_request(None, Some(ids.clone()))]),
    };

    let to_i64 = |what: &str, v: u64| {
        i64::try_from(v).map_err(|_| invalid(format!("{what} of {v} bytes is too large")))
    };
    let memory = spec.memory.map(|m| to_i64("memory", m)).transpose()?;
    let shm_size = spec.shm_size.map(|m| to_i64("shm_size", m)).transpose()?;
    let nano_cpus = match spec.cpus {
        Some(c) if !(c.is_finite() && c > 0.0) => {
            return Err(invalid(format!("cpus must be a positive number, not {c}")))
        }
        Some(c) => Some((c * 1e9).round() as i64),
        None => None,
    };

    let host_config = HostConfig {
        mounts: (!mounts.is_empty()).then_some(mounts),
        devices: (!devices.is_empty()).then_some(devices),
        device_requests,
        network_mode: Some(spec.network.as_engine_str().to_string()),
        memory,
        // Swap equal to the limit means no swap: the limit is a hard one and an over-limit
        // stage is OOM-killed instead of crawling.
        memory_swap: memory,
        shm_size,
        nano_cpus,
        // A tiny init as PID 1 forwards SIGTERM to the command and reaps zombies; without it a
        // `sh -c` script ignores `docker stop` and only dies at SIGKILL after the grace period.
        init: Some(true),
        ..Default::default()
    };

    Ok(ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.cmd.is_empty()).then(|| spec.cmd.clone()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: spec.workdir.clone(),
        user: spec.user.clone(),
        labels: Some(labels),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        stop_timeout: i64::try_from(spec.stop_grace.as_secs()).ok(),
        host_config: Some(host_config),
        ..Default::default()
    })
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Mount, NetworkMode};

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut s = LineSplitter::new(Stream::Stdout);
        for c in chunks {
            s.push(c, &mut |l| out.push(l.line));
        }
        s.finish(&mut |l| out.push(l.line));
        out
    }

    #[test]
    fn lines_split_across_chunks_and_line_endings() {
        assert_eq!(split(&[b"a\nb", b"c\n", b"d"]), ["a", "bc", "d"]);
        assert_eq!(split(&[b"x\r\ny\r", b"\n"]), ["x", "y"]);
        assert_eq!(split(&[b"10%\r20%\r100%\n"]), ["10%", "20%", "100%"]);
        assert_eq!(split(&[b"a\n\nb\n"]), ["a", "", "b"]);
        assert_eq!(split(&[b"caf\xc3", b"\xa9\n"]), ["café"]);
    }

    #[test]
    fn body_carries_limits_labels_and_gpus() {
        let spec = ContainerSpec {
            image: "sha256:abc".into(),
            cmd: vec!["true".into()],
            mounts: vec![Mount {
                host: "/tmp/in".into(),
                container: "/in".into(),
                read_only: true,
            }],
            gpus: GpuRequest::All,
            devices: vec!["/dev/hailo0".into()],
            memory: Some(1 << 20),
            cpus: Some(1.5),
            labels: [("heddle.run".to_string(), "r1".to_string())].into(),
            network: NetworkMode::None,
            ..Default::default()
        };
        let body = create_body(&spec).unwrap();
        let labels = body.labels.unwrap();
        assert_eq!(labels["heddle.managed"], "true");
        assert_eq!(labels["heddle.run"], "r1");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
        assert_eq!(hc.memory_swap, Some(1 << 20));
        let gpu = &hc.device_requests.unwrap()[0];
        assert_eq!(gpu.count, Some(-1));
        assert_eq!(gpu.capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(hc.mounts.unwrap()[0].read_only, Some(true));
        assert_eq!(
            hc.devices.unwrap()[0].path_in_container.as_deref(),
            Some("/dev/hailo0")
        );
    }

    #[test]
    fn bad_device_is_an_invalid_spec() {
        let spec = ContainerSpec {
            image: "img".into(),
            devices: vec!["/dev/x:/dev/y:rwx".into()],
            ..Default::default()
        };
        let err = create_body(&spec).unwrap_err();
        assert!(matches!(err, ContainerError::InvalidSpec { .. }), "{err}");
    }
}

//! The Docker executor: the same sandbox as the host executor, bind-mounted into a container
//! (`/heddle/in` read-only, `/heddle/out` and `/heddle/work` writable, the `uses` folder
//! read-only at `/heddle/stage`). The container runs as the invoking user unless the stage says
//! otherwise, so outputs belong to whoever ran heddle. Lifecycle and cleanup live in
//! `heddle-containers`.
//!
//! Cancellation has two steps, like the host executor's: the graceful token stops the
//! container (SIGTERM, SIGKILL after [`GRACE`]); the force token (a second Ctrl-C) abandons the
//! stop and force-removes the run's containers at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures_util::future::BoxFuture;
use heddle_containers::{
    ContainerOutcome, ContainerSpec, Engine, GpuRequest, ImageIdentity, Mount, NetworkMode,
};
use tokio::sync::mpsc::UnboundedSender;

use super::{Cancel, ContainerRequest, ExecError, ExecOutcome, ExecRequest, Executor, Transfer};
use crate::hosts::Host;
use crate::model::{ContainerOpts, Network};
use crate::render::{Command, PathLayout};
use crate::spec::GpuSpec;

/// Time between SIGTERM and SIGKILL when a container stage is timed out or interrupted.
const GRACE: Duration = Duration::from_secs(3);

/// How long a forced cancel waits for the engine to finish removing the run's containers.
const REMOVE_WAIT: Duration = Duration::from_secs(15);

/// One connected engine per `docker_host` (`None`: bollard's defaults).
#[derive(Clone, Default)]
pub struct DockerExecutor {
    pub engines: BTreeMap<Option<String>, Engine>,
}

impl ContainerRequest {
    /// A container stage's settings (`c`) as the engine takes them, for an instance of image
    /// reference `image` with its rendered `gpus`; the image by id when it was resolved.
    ///
    /// Every setting is named here, so one added to [`ContainerOpts`] fails to compile until
    /// it is placed; the cache key is derived from the request this returns
    /// ([`crate::key::ExecutorIdentity::of`]), never from the settings a second time.
    pub fn for_instance(
        images: &BTreeMap<String, ImageIdentity>,
        c: &ContainerOpts,
        image: &str,
        gpus: Option<&GpuSpec>,
    ) -> ContainerRequest {
        let ContainerOpts {
            // Rendered per instance: `image` is the reference passed in, `gpus` its value.
            image: _,
            image_in_def: _,
            gpus_in_def: _,
            gpus: _,
            devices,
            network,
            shm_size,
            memory,
            cpus,
            user,
            workdir,
            // How the image reaches the engine; the image's id is what runs.
            pull: _,
            docker_host,
            transfer,
        } = c;
        let resolved = images.get(image).map(|i| i.id.clone());
        ContainerRequest {
            image_resolved: resolved.is_some(),
            image_id: resolved.unwrap_or_else(|| image.to_string()),
            gpus: gpus.map(|g| match g {
                GpuSpec::None | GpuSpec::Template(_) => GpuRequest::None,
                GpuSpec::All => GpuRequest::All,
                GpuSpec::Count(n) => GpuRequest::Count(*n as u32),
                GpuSpec::Ids(v) => GpuRequest::Ids(v.clone()),
            }),
            devices: devices.clone(),
            network: match network {
                Network::Host => NetworkMode::Host,
                Network::Bridge => NetworkMode::Bridge,
                Network::None => NetworkMode::None,
            },
            shm_size: shm_size.clone(),
            memory: memory.clone(),
            cpus: *cpus,
            user: user.clone(),
            workdir: workdir.clone(),
            docker_host: docker_host.clone(),
            transfer: *transfer,
            placed_on: None,
            holds: Vec::new(),
        }
    }

    /// Run on configured host `host` instead: its engine, and its `transfer` unless the stage
    /// chose one.
    pub fn on_host(mut self, host: &Host) -> ContainerRequest {
        self.docker_host = Some(host.docker.clone());
        if self.transfer == Transfer::Auto {
            self.transfer = host.transfer;
        }
        self.placed_on = Some(host.name.clone());
        self
    }
}

impl Executor for DockerExecutor {
    fn layout(&self, _sandbox: &Path, stage_dir: Option<&Path>) -> PathLayout {
        let mut l = PathLayout::virtual_root();
        if stage_dir.is_none() {
            l.stage_dir = None;
        }
        l
    }

    fn execute<'a>(
        &'a self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>> {
        Box::pin(self.run(req, lines, cancel))
    }
}

impl DockerExecutor {
    /// Run instance `req` in a container on its engine until it exits, times out or is
    /// cancelled.
    async fn run(
        &self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> Result<ExecOutcome, ExecError> {
        let c = req
            .container
            .as_ref()
            .ok_or_else(|| ExecError::NoContainerSettings {
                label: req.label.clone(),
            })?;
        let engine = self
            .engines
            .get(&c.docker_host)
            .ok_or_else(|| ExecError::NoEngine {
                label: req.label.clone(),
                host: c.docker_host.clone(),
            })?;
        let spec = container_spec(&req, c);
        mount_sources(&req.sandbox, c.user.is_some()).map_err(|source| {
            ExecError::PrepareSandbox {
                sandbox: req.sandbox.clone(),
                source,
            }
        })?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<heddle_containers::LogLine>();
        let fwd = tokio::spawn(async move {
            while let Some(l) = rx.recv().await {
                let _ = lines.send(l.line);
            }
        });
        let outcome = tokio::select! {
            outcome = engine.run(&spec, Some(tx), cancel.graceful.clone()) => outcome,
            // A second Ctrl-C: drop the graceful stop (its drop guard starts a removal) and
            // force-remove this run's containers now, so they are gone before heddle exits.
            _ = cancel.force.cancelled() => {
                remove_run(engine, &req.run_id).await?;
                Ok(ContainerOutcome::Cancelled)
            }
        };
        let _ = fwd.await;
        // The status record keeps one line with every cause (`error_chain`): the engine's
        // reason, not only the headline ("failed to create a container from image …").
        let outcome = outcome?;
        Ok(match outcome {
            ContainerOutcome::Exited { code } => ExecOutcome::Exited(code),
            ContainerOutcome::OomKilled { code } => ExecOutcome::OomKilled(code),
            ContainerOutcome::TimedOut => ExecOutcome::TimedOut(req.timeout.unwrap_or_default()),
            ContainerOutcome::Cancelled => ExecOutcome::Cancelled,
        })
    }
}

/// What the engine is asked to run for instance `req` with container settings `c`.
fn container_spec(req: &ExecRequest, c: &ContainerRequest) -> ContainerSpec {
    let cmd = match &req.command {
        Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        Command::Exec(v) => v.clone(),
    };
    let archive = c.transfer.uses_archive(c.docker_host.as_deref());
    let SandboxMounts {
        mounts,
        copy_in,
        copy_out,
    } = SandboxMounts::for_request(req, archive);
    let mut env = req.env.clone();
    if let Some(f) = env.get_mut("HEDDLE_ERROR_FILE") {
        *f = "/heddle/work/.heddle-error.json".into();
    }
    if let Some(f) = env.get_mut("HEDDLE_FACTS_FILE") {
        *f = "/heddle/work/.heddle-facts.json".into();
    }
    ContainerSpec {
        image: c.image_id.clone(),
        cmd,
        env,
        mounts,
        copy_in,
        copy_out,
        workdir: Some(c.workdir.clone().unwrap_or_else(|| "/heddle/work".into())),
        user: Some(c.user.clone().unwrap_or_else(invoking_user)),
        gpus: c.gpus.clone().unwrap_or_default(),
        devices: c.devices.clone(),
        network: c.network,
        shm_size: c.shm_size.as_ref().map(|s| s.bytes),
        memory: c.memory.as_ref().map(|s| s.bytes),
        cpus: c.cpus,
        labels: container_labels(req, c, archive),
        timeout: req.timeout,
        stop_grace: GRACE,
        stdout_log: req.stdout_log.clone(),
        stderr_log: req.stderr_log.clone(),
        mask: req.mask.clone(),
        name: None,
    }
}

/// How the sandbox's folders reach the container.
struct SandboxMounts {
    mounts: Vec<Mount>,
    copy_in: Vec<heddle_containers::Copy>,
    copy_out: Vec<heddle_containers::Copy>,
}

impl SandboxMounts {
    /// The sandbox's folders as bind mounts, or (`archive`: no shared filesystem) as the same
    /// folders travelling through the archive API: all of them in before the start, the
    /// writable ones back after the exit.
    fn for_request(req: &ExecRequest, archive: bool) -> SandboxMounts {
        let mount = |dir: &str, read_only| Mount {
            host: req.sandbox.join(dir),
            container: format!("/heddle/{dir}"),
            read_only,
        };
        let mut mounts = vec![mount("in", true), mount("out", false), mount("work", false)];
        if let Some(d) = &req.stage_dir {
            mounts.push(Mount {
                host: d.clone(),
                container: "/heddle/stage".into(),
                read_only: true,
            });
        }
        if !archive {
            return SandboxMounts {
                mounts,
                copy_in: Vec::new(),
                copy_out: Vec::new(),
            };
        }
        let copy = |m: &Mount| heddle_containers::Copy {
            host: m.host.clone(),
            container: m.container.clone(),
        };
        SandboxMounts {
            copy_in: mounts.iter().map(copy).collect(),
            copy_out: mounts.iter().filter(|m| !m.read_only).map(copy).collect(),
            mounts: Vec::new(),
        }
    }
}

/// `heddle.pid` and `heddle.host` say which process owns the container, so a cleanup can tell
/// a crashed run's leftovers from a live run's containers.
fn container_labels(
    req: &ExecRequest,
    c: &ContainerRequest,
    archive: bool,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("heddle.run".to_string(), req.run_id.clone()),
        ("heddle.instance".to_string(), req.label.clone()),
        ("heddle.pid".to_string(), std::process::id().to_string()),
        ("heddle.host".to_string(), crate::hostname::hostname()),
        (
            "heddle.engine".to_string(),
            c.docker_host.clone().unwrap_or_else(|| "default".into()),
        ),
        (
            "heddle.transfer".to_string(),
            if archive { "archive" } else { "bind" }.to_string(),
        ),
    ]);
    // The `[hosts.NAME]` it was placed on (`heddle.host` is taken: it names the machine heddle
    // runs on, which `heddle gc` needs to tell a live owner from a dead one).
    if let Some(name) = &c.placed_on {
        labels.insert("heddle.placed-on".to_string(), name.clone());
    }
    for lock in &c.holds {
        labels.insert(heddle_containers::holds_label(lock), "true".to_string());
    }
    labels
}

/// Force-remove every container of run `run_id` and wait until the engine lists none: a
/// removal the drop guard started answers the second request with "already in progress", and
/// heddle must not exit while the container still exists.
async fn remove_run(engine: &Engine, run_id: &str) -> Result<(), ExecError> {
    let label = ("heddle.run", run_id);
    let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
    loop {
        engine.remove_labelled(Some(label)).await?;
        if engine.count_labelled(label).await? == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ExecError::ContainersRemain {
                run_id: run_id.into(),
                waited: REMOVE_WAIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Make sure every bind-mount source exists (the engine refuses a missing one, and a stage
/// with no inputs or outputs has no `in/` or `out/`). For a stage that sets `user`, also make
/// `out/<name>/` and `work/` writable by any user: that user is not the sandbox's owner, and
/// may be a name only the image knows, so chown is not an option. The sandbox folder itself
/// stays private to the invoking user; the engine mounts the folders as root.
fn mount_sources(sandbox: &Path, other_user: bool) -> std::io::Result<()> {
    for d in ["in", "out", "work"] {
        std::fs::create_dir_all(sandbox.join(d))?;
    }
    #[cfg(unix)]
    if other_user {
        use std::os::unix::fs::PermissionsExt;
        let mut dirs = vec![sandbox.join("work")];
        for e in std::fs::read_dir(sandbox.join("out"))? {
            dirs.push(e?.path());
        }
        for d in dirs {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", d.display())))?;
        }
    }
    #[cfg(not(unix))]
    let _ = other_user;
    Ok(())
}

fn invoking_user() -> String {
    #[cfg(unix)]
    {
        // SAFETY: getuid/getgid cannot fail.
        let (u, g) = unsafe { (libc::getuid(), libc::getgid()) };
        format!("{u}:{g}")
    }
    #[cfg(not(unix))]
    {
        "0:0".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_sources_exist_and_open_only_for_another_user() {
        let sb = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sb.path().join("out/o")).unwrap();
        mount_sources(sb.path(), false).unwrap();
        for d in ["in", "out", "work"] {
            assert!(sb.path().join(d).is_dir(), "{d}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| {
                std::fs::metadata(sb.path().join(p))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o777
            };
            assert_ne!(mode("out/o"), 0o777);
            mount_sources(sb.path(), true).unwrap();
            assert_eq!(mode("out/o"), 0o777);
            assert_eq!(mode("work"), 0o777);
            assert_ne!(mode("in"), 0o777, "inputs stay as they are");
        }
    }

    #[test]
    fn a_placed_request_takes_the_hosts_engine_and_transfer_unless_the_stage_chose() {
        let host = Host {
            name: "far".into(),
            docker: "tcp://127.0.0.1:2375".into(),
            tls: None,
            pools: BTreeMap::new(),
            engine_wide: Default::default(),
            transfer: Transfer::Archive,
            defined_at: "hosts.toml:1:8".into(),
        };
        let req = |transfer| ContainerRequest {
            image_id: "sha256:x".into(),
            image_resolved: true,
            gpus: None,
            devices: vec![],
            network: NetworkMode::None,
            shm_size: None,
            memory: None,
            cpus: None,
            user: None,
            workdir: None,
            docker_host: None,
            transfer,
            placed_on: None,
            holds: Vec::new(),
        };
        let placed = req(Transfer::Auto).on_host(&host);
        assert_eq!(placed.docker_host.as_deref(), Some("tcp://127.0.0.1:2375"));
        assert_eq!(placed.placed_on.as_deref(), Some("far"));
        assert_eq!(placed.transfer, Transfer::Archive);
        assert_eq!(req(Transfer::Bind).on_host(&host).transfer, Transfer::Bind);
    }

    #[test]
    fn an_engine_error_keeps_its_causes_for_the_one_line_record() {
        let e = ExecError::from(heddle_containers::ContainerError::Io {
            path: "/sb/out".into(),
            source: std::io::Error::other("no space left"),
        });
        assert_eq!(
            heddle_cache::error_chain(&e),
            "failed to write /sb/out: no space left"
        );
    }
}

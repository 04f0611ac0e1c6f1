//! The host executor: a child process in its own process group (a Job object on Windows), in a
//! fresh sandbox, with a cleared environment. On timeout or cancellation the whole group is
//! signalled and then killed; after the leader exits the group is killed too, so a backgrounded
//! grandchild cannot outlive its stage.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use command_group::{AsyncCommandGroup, AsyncGroupChild};
use futures_util::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::UnboundedSender;

use super::{Cancel, ExecError, ExecOutcome, ExecRequest, Executor};
use crate::render::{Command, PathLayout};

/// How long a stage gets between the polite signal and the kill.
const GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Default, Clone)]
pub struct HostExecutor;

impl Executor for HostExecutor {
    fn layout(&self, sandbox: &Path, stage_dir: Option<&Path>) -> PathLayout {
        PathLayout {
            in_root: sandbox.join("in").to_string_lossy().into_owned(),
            out_root: sandbox.join("out").to_string_lossy().into_owned(),
            stage_dir: stage_dir.map(|d| d.to_string_lossy().into_owned()),
        }
    }

    fn execute<'a>(
        &'a self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>> {
        Box::pin(run(req, lines, cancel))
    }
}

fn command_for(c: &Command) -> (String, Vec<String>) {
    match c {
        #[cfg(unix)]
        Command::Shell(s) => ("/bin/sh".into(), vec!["-c".into(), s.clone()]),
        #[cfg(windows)]
        Command::Shell(s) => ("cmd.exe".into(), vec!["/C".into(), s.clone()]),
        Command::Exec(v) => (v[0].clone(), v[1..].to_vec()),
    }
}

async fn run(
    req: ExecRequest,
    lines: UnboundedSender<String>,
    cancel: Cancel,
) -> Result<ExecOutcome, ExecError> {
    let (program, args) = command_for(&req.command);
    // Resolve the program against the stage's PATH, not heddle's.
    let resolved = resolve_program(&program, req.env.get("PATH").map(String::as_str));
    let mut cmd = tokio::process::Command::new(&resolved);
    cmd.args(&args)
        .current_dir(req.sandbox.join("work"))
        .env_clear()
        .envs(&req.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(target_os = "linux")]
    unsafe {
        // If heddle itself dies (kill -9), take the stage's leader with it.
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.group_spawn().map_err(|source| ExecError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pgid = child.id();
    let out = child.inner().stdout.take();
    let err = child.inner().stderr.take();
    let t_out = tokio::spawn(pump(out, req.stdout_log.clone(), lines.clone()));
    let t_err = tokio::spawn(pump(err, req.stderr_log.clone(), lines));

    let timeout = async {
        match req.timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        biased;
        status = child.wait() => {
            let status = status.map_err(|e| ExecError::Other(format!("failed to wait for `{program}`: {e}")))?;
            kill_group(&mut child, pgid).await;
            exit_outcome(status)
        }
        _ = cancel.graceful.cancelled() => {
            stop(&mut child, pgid, &cancel).await;
            ExecOutcome::Cancelled
        }
        _ = timeout => {
            stop(&mut child, pgid, &cancel).await;
            ExecOutcome::TimedOut(req.timeout.unwrap_or_default())
        }
    };
    for t in [t_out, t_err] {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(ExecError::Other(format!("log task failed: {e}"))),
        }
    }
    Ok(outcome)
}

fn resolve_program(program: &str, path: Option<&str>) -> std::path::PathBuf {
    let p = Path::new(program);
    if p.components().count() > 1 || path.is_none() {
        return p.to_path_buf();
    }
    for dir in std::env::split_paths(path.unwrap_or_default()) {
        let cand = dir.join(program);
        if cand.is_file() {
            return cand;
        }
        #[cfg(windows)]
        {
            let exe = dir.join(format!("{program}.exe"));
            if exe.is_file() {
                return exe;
            }
        }
    }
    p.to_path_buf()
}

fn exit_outcome(status: std::process::ExitStatus) -> ExecOutcome {
    if let Some(code) = status.code() {
        return ExecOutcome::Exited(code as i64);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExecOutcome::Signaled(sig);
        }
    }
    ExecOutcome::Exited(-1)
}

/// Ask the group to stop, give it a grace period (cut short by a forced cancel), then kill it.
async fn stop(child: &mut AsyncGroupChild, pgid: Option<u32>, cancel: &Cancel) {
    #[cfg(unix)]
    {
        use command_group::{Signal, UnixChildExt};
        let _ = child.signal(Signal::SIGTERM);
        tokio::select! {
            _ = child.wait() => {}
            _ = tokio::time::sleep(GRACE) => {}
            _ = cancel.force.cancelled() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = (cancel, GRACE);
    kill_group(child, pgid).await;
}

async fn kill_group(child: &mut AsyncGroupChild, pgid: Option<u32>) {
    // The leader may be gone already; killing its group still reaches leftovers.
    #[cfg(unix)]
    {
        if let Some(pid) = pgid {
            unsafe {
                libc::killpg(pid as i32, libc::SIGKILL);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = pgid;
    let _ = child.kill().await;
    let _ = child.wait().await;
}

async fn pump<R: AsyncRead + Unpin>(
    stream: Option<R>,
    log: std::path::PathBuf,
    lines: UnboundedSender<String>,
) -> Result<(), ExecError> {
    let Some(stream) = stream else { return Ok(()) };
    let mut file = tokio::fs::File::create(&log)
        .await
        .map_err(|source| ExecError::Log {
            path: log.clone(),
            source,
        })?;
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .await
            .map_err(|source| ExecError::Log {
                path: log.clone(),
                source,
            })?;
        if n == 0 {
            break;
        }
        file.write_all(&buf)
            .await
            .map_err(|source| ExecError::Log {
                path: log.clone(),
                source,
            })?;
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end();
        if !line.is_empty() {
            let _ = lines.send(line.to_string());
        }
    }
    file.flush().await.map_err(|source| ExecError::Log {
        path: log.clone(),
        source,
    })?;
    Ok(())
}

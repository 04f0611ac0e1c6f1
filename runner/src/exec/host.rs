//! The host executor: a child process in its own process group (a Job object on Windows), in a
//! fresh sandbox, with a cleared environment. On timeout or cancellation the whole group is
//! signalled and then killed; after the leader exits the group is killed too, so a backgrounded
//! grandchild cannot outlive its stage, and on Linux so are the descendants that left the group
//! (see [`super::contain`]). Then the pipes are drained for at most [`DRAIN`]: a process that
//! still holds them cannot keep the stage, and so the run, from ending.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::output::pump;
use super::{Cancel, ExecError, ExecOutcome, ExecRequest, Executor};
use crate::render::{Command, PathLayout};

/// How long a stage gets between the polite signal and the kill.
const GRACE: Duration = Duration::from_secs(3);

/// How long the pipes are read after the stage's processes are gone. Its own output is in the
/// pipe buffers by then (64 KiB each), so this only ever runs out when something heddle could
/// not kill still holds a pipe open.
const DRAIN: Duration = Duration::from_secs(1);

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

/// What to start: the program, its arguments, and where its standard streams go.
struct Launch {
    program: std::path::PathBuf,
    args: Vec<String>,
    stdin: Target,
    stdout: Target,
    stderr: Target,
    /// Set when a shell-form command runs without its shell (see [`super::simple`]).
    direct: bool,
    /// Appended to the command line as it is: `cmd.exe` parses its line itself, so the
    /// standard library's quoting must not touch it (see [`crate::cmd_exe`]).
    #[cfg(windows)]
    raw: Option<String>,
}

enum Target {
    Null,
    /// A pipe heddle reads into the log and the progress display.
    Pipe,
    #[cfg_attr(windows, allow(dead_code))]
    File(std::fs::File),
}

impl Target {
    fn stdio(self) -> Stdio {
        match self {
            Target::Null => Stdio::null(),
            Target::Pipe => Stdio::piped(),
            Target::File(f) => Stdio::from(f),
        }
    }
}

/// One argument may hold at most 128 KiB on Linux (MAX_ARG_STRLEN): a gather of thousands of
/// members renders a longer `sh -c` string, so such a script goes through a file instead.
#[cfg(unix)]
const LONGEST_SHELL_ARG: usize = 64 * 1024;

/// Above this many bytes of arguments the fast path leaves the command to the shell, which
/// reports E2BIG in its own words.
#[cfg(unix)]
const LONGEST_DIRECT_ARGV: usize = 1024 * 1024;

/// MAX_ARG_STRLEN: no single argument can be longer, shell or not.
#[cfg(unix)]
const LONGEST_ARG: usize = 128 * 1024 - 1;

fn launch(req: &ExecRequest, work: &Path) -> Result<Launch, ExecError> {
    let path = req.env.get("PATH").map(String::as_str);
    let streams = |program: std::path::PathBuf, args: Vec<String>| Launch {
        program,
        args,
        stdin: Target::Null,
        stdout: Target::Pipe,
        stderr: Target::Pipe,
        direct: false,
        #[cfg(windows)]
        raw: None,
    };
    match &req.command {
        #[cfg(unix)]
        Command::Shell(s) => {
            if let Some(l) = direct(s, work, path) {
                return Ok(l);
            }
            if s.len() > LONGEST_SHELL_ARG {
                let script = req.sandbox.join("command.sh");
                std::fs::write(&script, s).map_err(|source| ExecError::WriteScript {
                    path: script.clone(),
                    source,
                })?;
                let script = script.to_string_lossy().into_owned();
                return Ok(streams("/bin/sh".into(), vec![script]));
            }
            Ok(streams("/bin/sh".into(), vec!["-c".into(), s.clone()]))
        }
        #[cfg(windows)]
        Command::Shell(s) => {
            let _ = work;
            let mut l = streams(resolve_program("cmd.exe", path), Vec::new());
            l.raw = Some(crate::cmd_exe::command_line(s));
            Ok(l)
        }
        Command::Exec(v) => Ok(streams(resolve_program(&v[0], path), v[1..].to_vec())),
    }
}

/// The fast path: a shell-form command that needs no shell, with its redirections opened
/// here, in order, relative to the working folder. `None` (run it through `sh -c`) whenever
/// the parser declines, the program is not on PATH, a redirection cannot be opened (the
/// shell then reports it in its usual words) or a stream would be duplicated onto a pipe.
#[cfg(unix)]
fn direct(s: &str, work: &Path, path: Option<&str>) -> Option<Launch> {
    use super::simple::{self, OpenMode, Redirect};
    use std::os::unix::fs::OpenOptionsExt;
    if s.len() > LONGEST_DIRECT_ARGV {
        return None;
    }
    let parsed = simple::parse(s)?;
    if parsed.argv.iter().any(|a| a.len() > LONGEST_ARG) {
        return None;
    }
    let first = &parsed.argv[0];
    let program = if first.contains('/') {
        let p = work.join(first);
        p.is_file().then_some(p)?
    } else {
        let p = resolve_program(first, path);
        p.is_absolute().then_some(p)?
    };
    let mut fds = [Target::Null, Target::Pipe, Target::Pipe];
    for r in &parsed.redirects {
        match r {
            Redirect::File { fd, path, mode } => {
                let mut o = std::fs::OpenOptions::new();
                match mode {
                    OpenMode::Read => o.read(true),
                    OpenMode::Truncate => o.write(true).create(true).truncate(true),
                    OpenMode::Append => o.append(true).create(true),
                };
                let f = o.mode(0o666).open(work.join(path)).ok()?;
                fds[*fd as usize] = Target::File(f);
            }
            Redirect::Dup { fd, to } => {
                fds[*fd as usize] = match &fds[*to as usize] {
                    Target::Null => Target::Null,
                    Target::File(f) => Target::File(f.try_clone().ok()?),
                    Target::Pipe => return None,
                };
            }
        }
    }
    let [stdin, stdout, stderr] = fds;
    Some(Launch {
        program,
        args: parsed.argv[1..].to_vec(),
        stdin,
        stdout,
        stderr,
        direct: true,
    })
}

async fn run(
    req: ExecRequest,
    lines: UnboundedSender<String>,
    cancel: Cancel,
) -> Result<ExecOutcome, ExecError> {
    let work = req.sandbox.join("work");
    let l = launch(&req, &work)?;
    let program = l.program.to_string_lossy().into_owned();
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut cmd = command(&req, l, &work);
    #[cfg(target_os = "linux")]
    let token = super::contain::StageToken::new();
    #[cfg(target_os = "linux")]
    cmd.env(super::contain::TOKEN_VAR, token.value());
    let mut child = Group::spawn(cmd).map_err(|source| ExecError::Spawn {
        program: program.clone(),
        source,
    })?;
    let (out, err) = child.take_streams();
    let stop_reading = CancellationToken::new();
    // Both streams are pumped in this task, beside the wait: a task spawned per stream was a
    // spawn, a wake-up and a join per stage. A stream redirected to a file (`cat a > o`:
    // stdout) has no pump ([`pump`] returns at once).
    let out = pump(
        out,
        req.stdout_log.clone(),
        lines.clone(),
        stop_reading.clone(),
        req.mask.stream(),
    );
    let err = pump(
        err,
        req.stderr_log.clone(),
        lines,
        stop_reading.clone(),
        req.mask.stream(),
    );
    let pumps = async { tokio::join!(out, err) };
    let ended = async {
        let outcome = wait(&mut child, &req, &cancel, &program).await;
        #[cfg(target_os = "linux")]
        token.sweep().await;
        outcome
    };
    let (mut pumps, mut ended) = (std::pin::pin!(pumps), std::pin::pin!(ended));
    let mut pumped = None;
    let outcome = loop {
        tokio::select! {
            outcome = &mut ended => break outcome?,
            r = &mut pumps, if pumped.is_none() => pumped = Some(r),
        }
    };
    let (r_out, r_err) = match pumped {
        Some(r) => r,
        None => drain(pumps, stop_reading, &req.label).await,
    };
    r_out?;
    r_err?;
    Ok(outcome)
}

/// The command to spawn: in `work/`, with only the request's environment.
fn command(req: &ExecRequest, l: Launch, work: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&l.program);
    cmd.args(&l.args)
        .current_dir(work)
        .env_clear()
        .envs(&req.env)
        .stdin(l.stdin.stdio())
        .stdout(l.stdout.stdio())
        .stderr(l.stderr.stdio());
    if l.direct {
        // What `sh` would have exported.
        cmd.env("PWD", work);
    }
    #[cfg(windows)]
    if let Some(raw) = &l.raw {
        cmd.raw_arg(raw);
    }
    cmd
}

/// Until the leader exits, the run is cancelled, or the timeout passes; the group is gone after.
async fn wait(
    child: &mut Group,
    req: &ExecRequest,
    cancel: &Cancel,
    program: &str,
) -> Result<ExecOutcome, ExecError> {
    let timeout = async {
        match req.timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    Ok(tokio::select! {
        biased;
        status = child.wait() => {
            let status = status.map_err(|source| ExecError::Wait { program: program.to_string(), source })?;
            child.kill().await;
            exit_outcome(status)
        }
        _ = cancel.graceful.cancelled() => {
            stop(child, cancel).await;
            ExecOutcome::Cancelled
        }
        _ = timeout => {
            stop(child, cancel).await;
            ExecOutcome::TimedOut(req.timeout.unwrap_or_default())
        }
    })
}

/// Let the log pumps finish, for at most [`DRAIN`] after the stage's processes are gone.
async fn drain<T>(
    mut pumps: std::pin::Pin<&mut impl std::future::Future<Output = T>>,
    stop_reading: CancellationToken,
    label: &str,
) -> T {
    tokio::select! {
        r = &mut pumps => r,
        _ = tokio::time::sleep(DRAIN) => {
            tracing::debug!(label = %label, "stopped reading pipes still held open");
            stop_reading.cancel();
            pumps.await
        }
    }
}

/// A stage's process group. On unix it is started with `process_group(0)` and nothing else
/// between fork and exec, so the standard library uses `posix_spawn` rather than copying
/// heddle's address space with `fork()`; a watchdog ([`super::reaper`]) covers heddle's own
/// sudden death. On Windows a Job object holds the tree.
struct Group {
    #[cfg(unix)]
    child: tokio::process::Child,
    #[cfg(unix)]
    pgid: Option<u32>,
    #[cfg(windows)]
    child: command_group::AsyncGroupChild,
}

type Streams = (
    Option<tokio::process::ChildStdout>,
    Option<tokio::process::ChildStderr>,
);

impl Group {
    #[cfg(unix)]
    fn spawn(mut cmd: tokio::process::Command) -> std::io::Result<Group> {
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        super::reaper::arm();
        #[cfg(target_os = "linux")]
        let child = super::contain::spawn_leader(&mut cmd)?;
        #[cfg(not(target_os = "linux"))]
        let child = cmd.spawn()?;
        let pgid = child.id();
        #[cfg(target_os = "linux")]
        if let Some(p) = pgid {
            super::reaper::watch(p);
        }
        Ok(Group { child, pgid })
    }

    /// The Job object kills every process in it when its last handle closes, so a heddle that
    /// dies takes its stages' trees with it: the kernel does what [`super::reaper`] does on Linux.
    #[cfg(windows)]
    fn spawn(mut cmd: tokio::process::Command) -> std::io::Result<Group> {
        use command_group::AsyncCommandGroup;
        Ok(Group {
            child: cmd.group().kill_on_drop(true).spawn()?,
        })
    }

    fn inner(&mut self) -> &mut tokio::process::Child {
        #[cfg(unix)]
        return &mut self.child;
        #[cfg(windows)]
        return self.child.inner();
    }

    fn take_streams(&mut self) -> Streams {
        let c = self.inner();
        (c.stdout.take(), c.stderr.take())
    }

    /// Wait for the leader. On Windows the group's own `wait` also waits for every process in
    /// the Job, so a backgrounded grandchild would hold the stage open until it ended by
    /// itself; the leader's exit is what ends a stage, as on unix, and [`Group::kill`] then
    /// ends the rest.
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.inner().wait().await
    }

    /// The polite signal, to the whole group.
    fn terminate(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.pgid {
            unsafe {
                libc::killpg(pid as i32, libc::SIGTERM);
            }
        }
    }

    /// Kill the group (the leader may be gone already; its group can still hold leftovers)
    /// and reap the leader.
    async fn kill(&mut self) {
        #[cfg(unix)]
        {
            if let Some(pid) = self.pgid.take() {
                unsafe {
                    libc::killpg(pid as i32, libc::SIGKILL);
                }
                let _ = self.child.kill().await;
                let _ = self.child.wait().await;
                #[cfg(target_os = "linux")]
                {
                    super::reaper::forget(pid);
                    super::contain::leader_gone(pid);
                }
                return;
            }
        }
        // TerminateJobObject ends every process in the Job at once; then only the leader is
        // reaped, because the group's `wait` blocks on the Job's completion port, which may
        // hold no further message once the Job has already emptied.
        #[cfg(windows)]
        let _ = self.child.start_kill();
        let _ = self.inner().wait().await;
    }
}

/// A group dropped before [`Group::kill`] ran (its future was cancelled, or waiting on it
/// failed) is killed here: nothing of a stage may outlive it, and the watchdog must forget
/// its id before the kernel can give it to an unrelated process.
#[cfg(unix)]
impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.pgid.take() {
            unsafe {
                libc::killpg(pid as i32, libc::SIGKILL);
            }
            #[cfg(target_os = "linux")]
            {
                super::reaper::forget(pid);
                super::contain::leader_gone(pid);
            }
        }
    }
}

/// The file `program` names on `path`, or `program` itself when it names a path or is not found.
///
/// A found program is remembered per (name, PATH) for the rest of the process, as a shell's
/// command hash does, and only checked to still be a file on later lookups: the search stats
/// every PATH folder before the one holding it (nine `statx` calls a stage for `cat` on this
/// machine's PATH), and a chain's stages run the same few programs again and again
/// (benches/RESULTS.md, M15). A program put earlier on PATH during a run is found by the
/// next heddle, as a new program is by the next shell after `hash -r`.
fn resolve_program(program: &str, path: Option<&str>) -> std::path::PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Found = HashMap<(String, String), std::path::PathBuf>;
    static FOUND: Mutex<Option<Found>> = Mutex::new(None);
    let p = Path::new(program);
    if p.components().count() > 1 || path.is_none() {
        return p.to_path_buf();
    }
    let key = (program.to_string(), path.unwrap_or_default().to_string());
    let known = FOUND
        .lock()
        .expect("program cache")
        .as_ref()
        .and_then(|m| m.get(&key).cloned());
    if let Some(known) = known.filter(|k| k.is_file()) {
        return known;
    }
    let found = search_path(program, path);
    if found.is_absolute() {
        FOUND
            .lock()
            .expect("program cache")
            .get_or_insert_with(HashMap::new)
            .insert(key, found.clone());
    }
    found
}

/// The first file named `program` in a folder of `path`, or `program` itself.
fn search_path(program: &str, path: Option<&str>) -> std::path::PathBuf {
    let p = Path::new(program);
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
async fn stop(child: &mut Group, cancel: &Cancel) {
    child.terminate();
    #[cfg(unix)]
    tokio::select! {
        _ = child.wait() => {}
        _ = tokio::time::sleep(GRACE) => {}
        _ = cancel.force.cancelled() => {}
    }
    #[cfg(not(unix))]
    let _ = (cancel, GRACE);
    child.kill().await;
}

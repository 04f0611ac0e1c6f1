//! Nothing a host stage starts outlives it (Linux), not even a `setsid` daemon.
//!
//! A stage runs in its own process group, and the group is killed when the stage ends. A
//! process that calls `setsid` (or `setpgid`) leaves that group, and when its parent exits it
//! used to be adopted by PID 1: out of heddle's sight, holding the stage's stdout open (so
//! heddle waited for end of file forever) or simply living on after the run.
//!
//! The design, and why:
//! - **heddle is a child subreaper** (`PR_SET_CHILD_SUBREAPER`, set once before the first stage
//!   starts). An orphaned descendant of a stage is then re-parented to heddle instead of PID 1,
//!   and becomes visible in `/proc/<heddle>/task/<heddle>/children`. The kernel gives orphans to
//!   the first live thread of the subreaper (`find_alive_thread`), which is the main thread,
//!   so one small file lists them all: checked on this machine by a test
//!   (`tests/containment.rs`), where an orphan of a stage started from a tokio worker thread
//!   is found on the main thread's list.
//! - **Each stage's environment carries a token** (`HEDDLE_STAGE_TOKEN`, unique per stage and
//!   per heddle process) that its descendants inherit. An orphan is attributed to its stage by
//!   reading `/proc/<pid>/environ` (the environment it was started with; `setenv` in the
//!   process does not change it), so a stage's end kills only its own orphans, never the
//!   helper daemon of a stage still running beside it.
//! - **At a stage's end** (exit, timeout or cancellation), after its group is killed,
//!   [`StageToken::sweep`] reads the main thread's children: an orphan carrying this stage's
//!   token is killed, and its own children, re-parented to heddle in turn, are found on the next
//!   pass; orphans that have exited (zombies) are reaped, so a long run does not fill the pid
//!   table. A child heddle started itself (a stage's leader, which tokio waits for; a
//!   python-env command, which is in heddle's own process group) is never reaped here.
//! - **An orphan that cleared its environment** (`env -i`) and left heddle's session carries
//!   no token, so it is attributed by age instead: a stage's descendants all start after its
//!   leader, so an orphan that started before every stage still running (strictly, in clock
//!   ticks) cannot belong to any of them, and a stage's end kills it. In a chain that is at
//!   the end of the stage that started it; beside a concurrent stage that is older, it lives
//!   until a later stage's end. At the end of a run [`sweep_run`] kills any that are left.
//! - **If heddle itself dies** (`kill -9`), its orphans go to PID 1; the watchdog
//!   ([`super::reaper`]) scans `/proc` for the token prefix of this heddle process and kills
//!   what it finds, as well as the groups it was told about.
//!
//! Why not a cgroup per stage: it would catch a process that clears its environment, but it
//! needs a writable, delegated cgroup tree (root, or a systemd user slice with delegation on
//! cgroup v2; this machine offers only cgroup v1 controllers as root), so heddle would need a
//! fallback for most users anyway, plus a mkdir/rmdir per stage. The subreaper works for any
//! user on any Linux since 3.4 and costs one read of an (almost always empty) `/proc` file per
//! stage, a small fraction of even a `cat` stage (benches/RESULTS.md, M3).

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The environment variable that carries a stage's token.
pub const TOKEN_VAR: &str = "HEDDLE_STAGE_TOKEN";

/// Passes a sweep makes at most: each pass kills what it finds and then their children, which
/// the kernel re-parents to heddle, are found on the next one.
const PASSES: usize = 200;

/// The pause between passes, for killed processes to finish exiting.
const PASS_PAUSE: Duration = Duration::from_millis(5);

/// Stage leaders heddle spawned and tokio waits for: never reaped by a sweep.
static LEADERS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// This heddle process's part of every token: its pid and start time, so tokens of two
/// heddles (or of a pid reused later) never match.
pub fn token_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{}.{nanos:x}.", std::process::id())
    })
}

/// Become the subreaper of everything heddle starts. Idempotent; a failure only means escaped
/// daemons go to PID 1 as before.
pub fn become_subreaper() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            tracing::warn!(
                "failed to become a child subreaper ({}): a stage's escaped daemons will not be killed",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// Spawn a stage leader and record it as heddle's own before a sweep can see it exit.
pub fn spawn_leader(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    become_subreaper();
    let mut leaders = LEADERS.lock().expect("leader set");
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        leaders.insert(pid);
    }
    Ok(child)
}

/// The leader has been waited for (or abandoned to tokio's own reaping).
pub fn leader_gone(pid: u32) {
    LEADERS.lock().expect("leader set").remove(&pid);
}

/// One stage's token.
pub struct StageToken {
    value: String,
}

impl StageToken {
    pub fn new() -> StageToken {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        StageToken {
            value: format!("{}{n}", token_prefix()),
        }
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// Kill every orphan carrying this token and its descendants, and every tokenless orphan
    /// outside heddle's session that is older than all running stages; reap exited orphans.
    pub async fn sweep(&self) {
        let needle = format!("{TOKEN_VAR}={}\0", self.value).into_bytes();
        let any_token = format!("{TOKEN_VAR}=").into_bytes();
        let own_sid = unsafe { libc::getsid(0) };
        // Read lazily: almost every sweep finds no orphan at all.
        let mut oldest_running: Option<Option<u64>> = None;
        sweep(|env, stat, leaders| {
            if has_var(env, &needle) {
                return true;
            }
            if stat.sid == own_sid || has_var(env, &any_token) {
                return false;
            }
            let oldest = *oldest_running.get_or_insert_with(|| oldest_running_leader(leaders));
            oldest.is_some_and(|oldest| stat.start < oldest)
        })
        .await;
    }
}

impl Default for StageToken {
    fn default() -> Self {
        StageToken::new()
    }
}

/// The end of a run: kill the orphans of any stage of this heddle, and orphans that left
/// heddle's session (a daemon that also cleared its environment).
pub async fn sweep_run() {
    let needle = format!("{TOKEN_VAR}={}", token_prefix()).into_bytes();
    let own_sid = unsafe { libc::getsid(0) };
    sweep(|env, stat, _| has_var(env, &needle) || stat.sid != own_sid).await;
}

/// The start time (clock ticks since boot) of the oldest stage leader still running, `u64::MAX`
/// when none runs, or `None` when a leader's start cannot be read (then nothing is attributed
/// by age).
fn oldest_running_leader(leaders: &BTreeSet<u32>) -> Option<u64> {
    leaders.iter().try_fold(u64::MAX, |oldest, &pid| {
        read_stat(pid as i32).map(|s| oldest.min(s.start))
    })
}

/// What `/proc/<pid>/stat` says of a child.
struct Stat {
    zombie: bool,
    pgid: i32,
    sid: i32,
    /// When it started, in clock ticks since boot.
    start: u64,
}

async fn sweep(mut is_target: impl FnMut(&[u8], &Stat, &BTreeSet<u32>) -> bool) {
    let own_pgid = unsafe { libc::getpgrp() };
    let children = format!("/proc/{0}/task/{0}/children", std::process::id());
    let mut env = Vec::new();
    for _ in 0..PASSES {
        let Ok(list) = std::fs::read_to_string(&children) else {
            return;
        };
        let mut killed = 0;
        {
            let leaders = LEADERS.lock().expect("leader set");
            for pid in list
                .split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if leaders.contains(&(pid as u32)) {
                    continue;
                }
                let Some(stat) = read_stat(pid) else { continue };
                if stat.zombie {
                    // An orphan that exited: heddle adopted it, so heddle reaps it. Children
                    // heddle started itself outside a stage share heddle's group: left to
                    // whoever waits for them.
                    if stat.pgid != own_pgid {
                        unsafe {
                            libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
                        }
                    }
                    continue;
                }
                env.clear();
                if read_environ(pid, &mut env) && is_target(&env, &stat, &leaders) {
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    killed += 1;
                }
            }
        }
        if killed == 0 {
            return;
        }
        tokio::time::sleep(PASS_PAUSE).await;
    }
    tracing::warn!("orphaned stage processes kept appearing; some may be left");
}

fn read_stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session ...`; comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    let _ppid = f.next()?;
    let pgid = f.next()?.parse().ok()?;
    let sid = f.next()?.parse().ok()?;
    // Field 22 (`starttime`) is the 16th after the session.
    let start = f.nth(15)?.parse().ok()?;
    Some(Stat {
        zombie: state == "Z" || state == "X",
        pgid,
        sid,
        start,
    })
}

fn read_environ(pid: i32, buf: &mut Vec<u8>) -> bool {
    use std::io::Read;
    match std::fs::File::open(format!("/proc/{pid}/environ")) {
        Ok(mut f) => f.read_to_end(buf).is_ok(),
        Err(_) => false,
    }
}

/// Whether a NUL-separated environment holds an entry starting with `needle` (which begins
/// with the variable's name, so it matches only at an entry's start).
fn has_var(env: &[u8], needle: &[u8]) -> bool {
    env.split(|b| *b == 0).any(|entry| {
        let entry_nul = entry.len() + 1;
        // A needle ending in NUL must match the whole entry.
        match needle.split_last() {
            Some((0, name_value)) => entry == name_value && entry_nul == needle.len(),
            _ => entry.starts_with(needle),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_its_own_entry_only() {
        let env = b"PATH=/bin\0HEDDLE_STAGE_TOKEN=1.a.12\0X=HEDDLE_STAGE_TOKEN=1.a.3\0";
        assert!(has_var(env, b"HEDDLE_STAGE_TOKEN=1.a.12\0"));
        assert!(
            !has_var(env, b"HEDDLE_STAGE_TOKEN=1.a.1\0"),
            "a prefix of the token"
        );
        assert!(
            !has_var(env, b"HEDDLE_STAGE_TOKEN=1.a.3\0"),
            "inside another value"
        );
        assert!(has_var(env, b"HEDDLE_STAGE_TOKEN=1.a."), "the run's prefix");
        assert!(!has_var(env, b"HEDDLE_STAGE_TOKEN=2.a."));
    }

    #[test]
    fn tokens_differ_per_stage_and_share_the_process_prefix() {
        let (a, b) = (StageToken::new(), StageToken::new());
        assert_ne!(a.value(), b.value());
        assert!(a.value().starts_with(token_prefix()));
        assert!(token_prefix().starts_with(&format!("{}.", std::process::id())));
    }
}

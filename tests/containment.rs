//! A stage's whole process tree ends with it, heddle never hangs on a stage's pipes, a signal
//! always ends a run with its record written, output costs bounded memory, and a dead run's
//! sandboxes do not pile up (issue 14, items 4 and 5). Linux: these rely on /proc.
#![cfg(target_os = "linux")]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use support::process::{
    assert_gone, signal, wait_ended, wait_for, wait_for_pid, Running, SIGHUP, SIGTERM,
};
use support::records::assert_interrupted;
use support::{assert_contains, instance, Project};

/// A pipeline of one stage running `run` (a TOML basic string's content), with `extra` keys.
fn one_stage(p: &Project, run: &str, extra: &str) {
    p.file(
        "p.toml",
        &format!(
            "[pipeline]\nname = \"contain\"\n[stages.s]\nrun = \"{run}\"\noutputs = {{ o = \"o\" }}\n{extra}\n"
        ),
    );
}

/// A shell snippet starting a daemon in its own session that writes its pid to `pidfile` and
/// sleeps; `redirect` is appended to the daemon's command (e.g. `>/dev/null 2>&1`).
fn daemon(pidfile: &Path, redirect: &str) -> String {
    format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 300' {redirect} &",
        pidfile.display()
    )
}

/// A project, and the file the daemon its stage starts writes its pid to.
fn daemon_project() -> (Project, PathBuf) {
    let p = Project::new();
    let pidfile = p.path("daemon.pid");
    (p, pidfile)
}

/// Runs `p.toml` in the background, reads the daemon's pid once it is in `pidfile`, and waits
/// (30 s at most) for heddle to end: it must exit `code`, and the daemon must be gone with it.
fn run_and_see_the_daemon_gone(p: &Project, pidfile: &Path, code: i32, case: &str) {
    let mut child = p.spawn_run("p.toml", &[]);
    let pid = wait_for_pid(pidfile, &mut child);
    let status = wait_ended(&mut child, Duration::from_secs(30), case);
    assert_eq!(status.code(), Some(code), "{case}");
    assert_gone(&pid, case);
}

#[test]
fn a_setsid_daemon_holding_stdout_cannot_outlast_the_stage_timeout() {
    let (p, pidfile) = daemon_project();
    one_stage(
        &p,
        &format!("{} sleep 300", daemon(&pidfile, "")),
        "timeout = \"1s\"",
    );
    run_and_see_the_daemon_gone(&p, &pidfile, 1, "stage timeout");
    let v = p.last_record();
    assert_eq!(instance(&v, "s")["status"]["error_class"], "Timeout", "{v}");
}

#[test]
fn a_setsid_daemon_holding_stdout_does_not_keep_a_finished_stage_running() {
    let (p, pidfile) = daemon_project();
    // The stage itself succeeds at once; its daemon would hold stdout for five minutes.
    one_stage(
        &p,
        // Wait until the daemon has written its pid: the stage must not end (and have its
        // daemon killed) before the test can know whom to look for.
        &format!(
            "{} while [ ! -s {pf} ]; do sleep 0.01; done; echo done > {{{{ out.o }}}}",
            daemon(&pidfile, ""),
            pf = pidfile.display()
        ),
        "",
    );
    run_and_see_the_daemon_gone(&p, &pidfile, 0, "finished stage");
}

#[test]
fn a_daemon_with_redirected_fds_is_gone_after_its_stage() {
    let (p, pidfile) = daemon_project();
    // The daemon's own child (`sleep`, after the `sh` forks it) must go too.
    one_stage(
        &p,
        &format!(
            "setsid sh -c 'sleep 300 & echo $! > {}; wait' >/dev/null 2>&1 </dev/null & \
             sleep 0.2; echo done > {{{{ out.o }}}}",
            pidfile.display()
        ),
        "",
    );
    p.run("p.toml", &[]).ok();
    let pid = p.read("daemon.pid").trim().to_string();
    assert_gone(&pid, "redirected daemon");
}

/// A shell loop that waits up to `secs` for process `$pid` to be gone and exits 3 if it is not.
fn await_gone(pid: &str, secs: u32) -> String {
    format!(
        "i=0; while kill -0 {pid} 2>/dev/null; do i=$((i+1)); [ $i -gt {n} ] && exit 3; sleep 0.01; done",
        n = secs * 100
    )
}

#[test]
fn a_daemon_that_clears_its_environment_is_gone_before_the_next_stage_of_a_chain() {
    let (p, pidfile) = daemon_project();
    // `env -i` leaves no stage token to find the daemon by: it is attributed by its age.
    p.file(
        "p.toml",
        &format!(
            "[pipeline]\nname = \"contain\"\n\
             [stages.a]\nrun = \"setsid env -i sh -c 'echo $$ > {pf}; exec sleep 300' >/dev/null 2>&1 </dev/null & \
             while [ ! -s {pf} ]; do sleep 0.01; done; echo a > {{{{ out.o }}}}\"\noutputs = {{ o = \"o\" }}\n\
             [stages.b]\ninputs = {{ a = \"a.o\" }}\nrun = \"{gone}; echo gone > {{{{ out.o }}}}\"\noutputs = {{ o = \"o\" }}\n",
            pf = pidfile.display(),
            gone = await_gone(&format!("$(cat {})", pidfile.display()), 5),
        ),
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/contain/b/o"), "gone\n");
}

#[test]
fn a_tokenless_daemon_younger_than_a_running_stage_outlives_a_sibling_but_not_its_run() {
    let p = Project::new();
    let (pidfile, b_done) = (p.path("daemon.pid"), p.path("b.done"));
    // `a` starts first and, later, a daemon that clears its environment; `b` ends meanwhile.
    // At b's end the daemon is younger than the running `a`, so it may be a's: it must live.
    p.file(
        "p.toml",
        &format!(
            "[pipeline]\nname = \"contain\"\n\
             [stages.a]\nrun = \"sleep 0.3; setsid env -i sh -c 'echo $$ > {pf}; exec sleep 300' >/dev/null 2>&1 </dev/null & \
             while [ ! -f {bd} ]; do sleep 0.01; done; sleep 0.3; kill -0 $(cat {pf}) && echo alive > {{{{ out.o }}}}\"\n\
             outputs = {{ o = \"o\" }}\n\
             [stages.b]\nrun = \"while [ ! -s {pf} ]; do sleep 0.01; done; echo b > {{{{ out.o }}}}; touch {bd}\"\n\
             outputs = {{ o = \"o\" }}\n",
            pf = pidfile.display(),
            bd = b_done.display(),
        ),
    );
    p.run("p.toml", &["--jobs", "2"]).ok();
    assert_eq!(p.read("out/contain/a/o"), "alive\n");
    assert_gone(
        p.read("daemon.pid").trim(),
        "tokenless daemon after its run",
    );
}

#[test]
fn sigterm_and_sighup_end_a_run_held_by_a_daemon_with_its_record_written() {
    for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGHUP, "SIGHUP")] {
        let (p, pidfile) = daemon_project();
        let stage_pid = p.path("stage.pid");
        one_stage(
            &p,
            &format!(
                "{} echo $$ > {}; sleep 300",
                daemon(&pidfile, ""),
                stage_pid.display()
            ),
            "",
        );
        let mut child = p.spawn_run("p.toml", &[]);
        let daemon_pid = wait_for_pid(&pidfile, &mut child);
        let leader = wait_for_pid(&stage_pid, &mut child);
        signal(child.id(), sig);
        let status = wait_ended(&mut child, Duration::from_secs(30), name);
        assert_eq!(status.code(), Some(130), "{name}");
        assert_gone(&daemon_pid, name);
        assert_gone(&leader, name);
        assert_interrupted(&p.last_record(), "s", name);
        assert!(
            p.scratch_entries().is_empty(),
            "{name}: scratch still holds {:?}",
            p.scratch_entries()
        );
    }
}

/// wait4(2): the exit status and peak RSS (KiB) of a child, its waited-for descendants
/// included (here only `head` and `tr`, which stay small).
fn wait_rss(child: &Child) -> (i32, i64) {
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

#[test]
// The child is reaped by `wait_rss` (wait4), which std does not know about.
#[allow(clippy::zombie_processes)]
fn a_300_mb_line_on_stderr_costs_bounded_memory_and_a_bounded_tail() {
    let p = Project::new();
    // 300 MB with no newline, then a short last line, then a failure.
    one_stage(
        &p,
        "head -c 300000000 /dev/zero | tr '\\\\0' x >&2; echo >&2; echo 'BoomError: the end' >&2; exit 3",
        "",
    );
    let child = p.spawn_run("p.toml", &[]);
    let (code, max_rss_kib) = wait_rss(&child);
    assert_eq!(code, 1);
    // Today's main: about 945 MB. A bounded pump is buffers plus the binary.
    assert!(
        max_rss_kib < 100 * 1024,
        "peak RSS {} MiB for a 300 MB line",
        max_rss_kib / 1024
    );
    let log_len = std::fs::read_dir(p.path(".heddle/logs"))
        .unwrap()
        .flatten()
        .map(|run| std::fs::metadata(run.path().join("s.err")))
        .find_map(Result::ok)
        .map(|m| m.len());
    let v = p.last_record();
    let status = &instance(&v, "s")["status"];
    let tail = status["stderr_tail"].as_str().unwrap();
    assert!(tail.len() <= 4096, "stderr_tail of {} bytes", tail.len());
    assert!(
        tail.ends_with("BoomError: the end"),
        "{}",
        &tail[tail.len() - 40..]
    );
    assert_eq!(status["error_class"], "BoomError");
    assert_eq!(
        log_len,
        Some(300_000_001 + "BoomError: the end\n".len() as u64),
        "the log has every byte"
    );
}

/// Start a run whose stage sleeps; return it once its sandbox exists.
fn start_long_run(p: &Project) -> Running {
    let started = p.path("started");
    one_stage(p, &format!("touch {}; sleep 300", started.display()), "");
    let mut child = p.spawn_run("p.toml", &[]);
    wait_for("the stage to start", Duration::from_secs(20), || {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        started.exists()
    });
    Running(child)
}

#[test]
fn a_dead_runs_sandbox_is_removed_by_the_next_run_and_by_gc_and_a_live_ones_kept() {
    for cleaner in ["run", "gc"] {
        let p = Project::new();
        // A live run, in another project sharing the cache.
        let q = Project::new();
        let q = Project {
            cache: p.cache.clone(),
            ..q
        };
        let mut live = start_long_run(&q);
        let live_dir = p.scratch_entries();
        assert_eq!(live_dir.len(), 1, "{cleaner}: {live_dir:?}");

        // A run killed with SIGKILL leaves its sandbox folder behind.
        let mut dead = start_long_run(&p);
        dead.0.kill().unwrap();
        dead.0.wait().unwrap();
        let both = p.scratch_entries();
        assert_eq!(both.len(), 2, "{cleaner}: {both:?}");

        match cleaner {
            "run" => {
                p.file(
                    "quick.toml",
                    "[pipeline]\nname = \"quick\"\n[stages.q]\nrun = \"echo q > {{ out.o }}\"\noutputs = { o = \"o\" }\n",
                );
                p.run("quick.toml", &[]).ok();
            }
            _ => {
                p.heddle(&["cache", "gc"]).ok();
            }
        }
        let after = p.scratch_entries();
        assert_eq!(
            after, live_dir,
            "{cleaner}: only the live run's folder is kept"
        );
        signal(live.0.id(), SIGTERM);
        wait_ended(&mut live.0, Duration::from_secs(30), "live run");
        assert!(
            p.scratch_entries().is_empty(),
            "{cleaner}: {:?}",
            p.scratch_entries()
        );
    }
}

/// Whether this process is root; a root-only test skips otherwise (or fails under
/// `HEDDLE_REQUIRE_ROOT=1`, which tests/all.sh sets when it runs as root).
fn root_or_skip(what: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    support::found_or_skip(root.then_some(()), "HEDDLE_REQUIRE_ROOT", what, "not root").is_some()
}

/// The mount points at or beneath `dir` (from /proc/self/mountinfo, octal escapes undone).
fn mounts_beneath(dir: &Path) -> Vec<PathBuf> {
    let unescape = |s: &str| {
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() {
                out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap());
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        PathBuf::from(String::from_utf8(out).unwrap())
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| unescape(l.split(' ').nth(4).unwrap()))
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Detaches whatever a failed test left mounted in its project, before the project's removal
/// could delete through it.
struct DetachOnDrop(PathBuf);

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        for m in mounts_beneath(&self.0).iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(m)
                .status();
        }
    }
}

/// A root stage bind-mounts a host folder into its sandbox and exits with it mounted: cleaning
/// the sandbox (reused by the next stage, then removed at the run's end) deleted every file of
/// the host folder through the mount and made it mode 0777. Now the mounts are detached and
/// the host folder is untouched.
#[test]
fn a_bind_mount_a_stage_leaves_is_detached_never_emptied() {
    if !root_or_skip("a bind mount left in a sandbox") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    let _detach = DetachOnDrop(p.root().to_path_buf());
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("sub")).unwrap();
    std::fs::write(outside.path().join("sentinel.txt"), "kept").unwrap();
    std::fs::write(outside.path().join("sub/s.txt"), "kept").unwrap();
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
    p.file(
        "p.toml",
        &support::fill(
            include_str!("fixtures/integrity/bind_mount.toml"),
            &[("OUTSIDE", &outside.path().display().to_string())],
        ),
    );
    p.run("p.toml", &["--jobs", "1"]).ok();
    assert_eq!(p.read("out/mounts/b/o"), "a\n");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("sentinel.txt")).unwrap(),
        "kept"
    );
    assert!(outside.path().join("sub/s.txt").exists());
    let mode = std::fs::metadata(outside.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o750);
    assert_eq!(mounts_beneath(p.root()), Vec::<PathBuf>::new());
    assert!(p.scratch_entries().is_empty(), "{:?}", p.scratch_entries());
}

/// A stage leaves folders a non-root user cannot read or empty (`chmod 000`, and its working
/// folder read-only): the run's scratch folder stayed behind for good, and gc could not
/// remove it either. Run as `nobody` when the test is root.
#[test]
fn a_locked_folder_a_stage_leaves_does_not_leak_its_sandbox() {
    let p = Project::new();
    one_stage(
        &p,
        "mkdir -p locked/sub && echo f > locked/sub/f && echo g > locked/g && \
         chmod 000 locked/sub locked && chmod 555 . && echo x > {{ out.o }}",
        "",
    );
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let chown = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(p.root())
            .status()
            .unwrap();
        assert!(chown.success());
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            support::bin(),
        ]);
        c
    } else {
        std::process::Command::new(support::bin())
    };
    let out = cmd
        .current_dir(p.root())
        .env("HEDDLE_CACHE_DIR", &p.cache)
        .env("HEDDLE_CONFIG_DIR", p.path(".user-config"))
        .args(["run", "p.toml", "--progress", "plain"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(p.scratch_entries().is_empty(), "{:?}", p.scratch_entries());
}

/// A sandbox that cannot be removed at the end of a run (a root stage left an immutable file
/// in it) is named in a warning with the OS reason, instead of being left behind in silence;
/// once the file can go, `heddle cache gc` removes it.
#[test]
fn a_sandbox_that_cannot_be_removed_is_named_with_the_reason() {
    if !root_or_skip("an immutable file left in a sandbox") {
        return;
    }
    let p = Project::with_pipeline(include_str!("fixtures/integrity/immutable_file.toml"));
    let r = p.run("p.toml", &[]).ok();
    let stuck: Vec<PathBuf> = walk(&p.cache.join("scratch"))
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "stuck"))
        .collect();
    // Cleared before any assertion, so a failure does not leave an undeletable temp dir.
    for f in &stuck {
        std::process::Command::new("chattr")
            .arg("-i")
            .arg(f)
            .status()
            .unwrap();
    }
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_contains(&r.stderr, "could not remove the sandbox ");
    assert_contains(
        &r.stderr,
        ": Operation not permitted (os error 1) (the next run or `heddle cache gc` tries again)",
    );
    assert_eq!(p.read("out/stuck/a/o"), "a\n");
    p.heddle(&["cache", "gc"]).ok();
    assert!(p.scratch_entries().is_empty(), "{:?}", p.scratch_entries());
}

/// Every file beneath `dir`, not following links.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            files.extend(walk(&e.path()));
        } else {
            files.push(e.path());
        }
    }
    files
}

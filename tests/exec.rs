//! The host executor through the real binary: commands that skip `sh` behave as they would
//! under it, commands too long for one argument still run, reused sandboxes start empty, and a
//! `kill -9` of heddle takes its running stages with it.

use crate::support;

use support::assert_contains;
use support::fill;
use support::process::{assert_gone, wait_ended, wait_for_pid};
use support::{instance, Project};

/// Shell-form commands run without `sh` when they need none; the result must be what `sh -c`
/// gives, including redirection order, appends, stdin, stderr and exit codes.
#[test]
fn commands_without_shell_syntax_behave_as_under_sh() {
    let p = Project::new();
    p.file("data/in.txt", "b\na\n")
        .file("p.toml", include_str!("fixtures/exec/without_shell.toml"));
    let run = p.run("p.toml", &["--keep-going"]);
    assert_eq!(p.read("out/d/sorted/o.txt"), "a\nb\n");
    assert_eq!(p.read("out/d/append/o.txt"), "a\nb\na\nb\n");
    let rec = p.last_record();
    let inst = |l: &str| instance(&rec, l);
    // `ls` exits 2 for the missing file; its complaint went to the output file, not the log.
    assert_eq!(inst("both")["status"]["exit_code"], 2, "{}", run.all());
    // The program is not on PATH: sh reports it, exit 127, as before the fast path existed.
    assert_eq!(inst("missing")["status"]["exit_code"], 127, "{}", run.all());
    // Logs exist only for streams a stage wrote to: `sorted` printed nothing, sh complained
    // about `missing` on stderr.
    let log = |l: &str, i: usize| std::path::PathBuf::from(inst(l)["logs"][i].as_str().unwrap());
    assert!(!log("sorted", 0).exists() && !log("sorted", 1).exists());
    let complaint = std::fs::read_to_string(log("missing", 1)).unwrap();
    assert_contains(&complaint, "no-such-program-xyz");
    let env = p.read("out/d/env/o.txt");
    assert_contains(&env, "PWD=");
    assert_contains(&env, "HEDDLE_INSTANCE=env");
}

/// Linux caps one argument at 128 KiB; `sh -c` of a longer script must still run.
#[test]
fn a_shell_command_longer_than_one_argument_still_runs() {
    let p = Project::new();
    let long = "x".repeat(200_000);
    p.file(
        "p.toml",
        &fill(
            include_str!("fixtures/exec/long_command.toml"),
            &[("LONG", &long)],
        ),
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/long/s/o.txt").trim(), "200000");
}

/// One sandbox serves one stage after another: nothing a stage leaves in `work/`, `in/` or
/// `out/` is visible to the next one, and nothing is left in scratch after the run.
#[test]
fn a_reused_sandbox_shows_the_next_stage_only_its_own_inputs() {
    let p = Project::with_pipeline(include_str!("fixtures/exec/reused_sandbox.toml"));
    p.run("p.toml", &["-j", "1"]).ok();
    // `work/` is empty, `in/` holds `x`, `out/` holds `o`.
    assert_eq!(p.read("out/r/b/o.txt"), ".:\n\n../in:\nx\n\n../out:\no\n");
    let left = p.scratch_entries();
    assert!(left.is_empty(), "scratch still holds {left:?}");
}

/// A heddle killed with SIGKILL cannot stop its stages itself; its watchdog must.
#[cfg(target_os = "linux")]
#[test]
fn kill_9_of_heddle_kills_the_running_stage_groups() {
    let p = Project::new();
    let pidfile = p.sleeper("");
    let mut child = p.spawn_run("p.toml", &[]);
    let pid = wait_for_pid(&pidfile, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_gone(&pid, "the stage's `sleep` after heddle's kill -9");
}

/// The first stage of a run kills heddle at once: the watchdog must already be running when
/// that stage starts (it was once forked only after the first spawn, leaving a window in which
/// a `kill -9` left the stage running).
#[cfg(target_os = "linux")]
#[test]
fn kill_9_of_heddle_by_its_first_stage_still_kills_that_stage() {
    let p = Project::new();
    let pidfile = p.path("pid");
    p.file(
        "p.toml",
        &format!(
            "[pipeline]\nname = \"suicide\"\n[stages.s]\nrun = \"sleep 300 & echo $! > '{}'; kill -9 $PPID; wait\"\noutputs = {{ o = \"o\" }}\n",
            pidfile.display()
        ),
    );
    let mut child = p.spawn_run("p.toml", &[]);
    // The stage writes the pid before it kills heddle, so heddle's end means the pid is there.
    let status = wait_ended(
        &mut child,
        std::time::Duration::from_secs(60),
        "the suicidal run",
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "{status}"
    );
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    assert_gone(&pid, "the first stage's `sleep` after it killed heddle");
}

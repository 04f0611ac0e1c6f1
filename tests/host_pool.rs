//! Devices locked across runs (issue 10): a pool declared `scope = "machine"` is one lock per
//! unit shared by every heddle on the host. Two runs' device stages never overlap, `heddle
//! status` names the holder, and `kill -9` of a holder frees the unit.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::fill;
use crate::support::process::{wait_ended, wait_for, StderrLines};
use crate::support::Project;
use crate::support::{assert_contains, assert_lacks};

fn device_project(name: &str, sleep: &str) -> Project {
    Project::with_pipeline(&fill(
        include_str!("fixtures/host_pool/device.toml"),
        &[("NAME", name), ("SLEEP", sleep)],
    ))
}

fn spawn_run(p: &Project, locks: &std::path::Path) -> Child {
    p.cmd(&["run", "p.toml", "--progress", "plain"])
        .env("HEDDLE_HOST_LOCK_DIR", locks)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn interval(p: &Project, pipeline: &str, i: u32) -> (f64, f64) {
    let text = p.read(&format!("out/{pipeline}/probe[i={i}]/t.txt"));
    let v: Vec<f64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    (v[0], v[1])
}

#[test]
fn two_runs_never_hold_a_host_unit_at_once() {
    let locks = tempfile::tempdir().unwrap();
    let a = device_project("dev-a", "0.3");
    let b = device_project("dev-b", "0.3");
    let (ra, rb) = (spawn_run(&a, locks.path()), spawn_run(&b, locks.path()));
    let (oa, ob) = (
        ra.wait_with_output().unwrap(),
        rb.wait_with_output().unwrap(),
    );
    assert!(
        oa.status.success(),
        "{}",
        String::from_utf8_lossy(&oa.stderr)
    );
    assert!(
        ob.status.success(),
        "{}",
        String::from_utf8_lossy(&ob.stderr)
    );
    let mut all = Vec::new();
    for (p, name) in [(&a, "dev-a"), (&b, "dev-b")] {
        for i in [1, 2] {
            all.push(interval(p, name, i));
        }
    }
    all.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
    for w in all.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap: {:?} and {:?}", w[0], w[1]);
    }
    let waited = [&oa, &ob].iter().any(|o| {
        String::from_utf8_lossy(&o.stderr).contains("waiting for host-wide `hailo`, held by pid")
    });
    assert!(waited, "one run says whom it waits for");
}

#[test]
fn status_names_the_holder_and_kill_9_frees_the_unit() {
    let locks = tempfile::tempdir().unwrap();
    let a = device_project("hold-a", "60");
    // A lock file for `heddle status` (it compares against one).
    let b = device_project("hold-b", "0");
    let mut ra = spawn_run(&a, locks.path());
    wait_for("a to take the unit", Duration::from_secs(30), || {
        !heddle_runner_holders(locks.path()).is_empty()
    });
    let mut rb = spawn_run(&b, locks.path());
    // b says it waits, naming a's pid; a holds the unit for 60 s, so b cannot have ended.
    let b_err = StderrLines::watch(&mut rb);
    b_err.wait_for(
        "waiting for host-wide `hailo`, held by pid",
        &mut rb,
        Duration::from_secs(30),
    );
    assert!(rb.try_wait().unwrap().is_none(), "b must wait for the unit");
    let pid_a = ra.id();
    let holders = heddle_runner_holders(locks.path());
    assert!(holders.contains(&format!("pid {pid_a}")), "{holders}");

    ra.kill().unwrap(); // SIGKILL
    ra.wait().unwrap();
    let out = wait_ended(&mut rb, Duration::from_secs(30), "b after a died");
    assert!(out.success());
    // Now b has run and written its lock file; `heddle status` shows no holder.
    let st = b
        .cmd(&["status", "p.toml"])
        .env("HEDDLE_HOST_LOCK_DIR", locks.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&st.stdout);
    assert_lacks(&text, "held ");
}

/// `heddle status` of a throwaway project sharing the lock folder, as text: the `held` lines.
fn heddle_runner_holders(locks: &std::path::Path) -> String {
    let p = device_project("observer", "0");
    p.cmd(&["run", "p.toml", "--progress", "quiet"])
        .env("HEDDLE_HOST_LOCK_DIR", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    let out = p
        .cmd(&["status", "p.toml"])
        .env("HEDDLE_HOST_LOCK_DIR", locks)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("held "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The old spelling `scope = "host"` still locks across runs, and says what to write instead,
/// pointing at the line.
#[test]
fn the_old_scope_spelling_warns_and_still_works() {
    let p = Project::new();
    let pipeline = fill(
        include_str!("fixtures/host_pool/device.toml"),
        &[("NAME", "old"), ("SLEEP", "0")],
    );
    p.file(
        "p.toml",
        &pipeline.replace("scope = \"machine\"", "scope = \"host\""),
    );
    let out = p.heddle(&["plan", "p.toml"]).ok();
    assert_contains(
        &out.stderr,
        "warning: resource pool `hailo`: `scope = \"host\"` is the old spelling of `scope = \"machine\"`; it is accepted until the next release\n  --> ",
    );
    assert_contains(&out.stderr, "p.toml:");
}

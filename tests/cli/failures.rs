//! Failures, timeouts, signals, crashes and concurrency: what a failed or stopped stage leaves
//! behind (nothing running, a clean cache) and what the record says.

use std::process::Stdio;
use std::time::Duration;

use crate::support::assert_contains;
use crate::support::process::{alive, signal, wait_for, wait_for_pid, SIGINT};
use crate::support::{instance, Project};

#[test]
fn allow_failure_delivers_status_records_downstream() {
    let p = Project::with_pipeline(include_str!("fixtures/allow_failure.toml"));
    let r = p.run("p.toml", &[]).ok();
    assert_contains(&r.stderr, "FAILED  work[precision=a16_w4]  AttributeError: 'function' object has no attribute 'set_wraparound_loss'");
    let table = p.read("out/f/compare/table.txt");
    assert_contains(&table, "precision=a16_w16 ran");
    assert_contains(&table, "precision=a16_w4 \"status\": \"skipped\" AttributeError: 'function' object has no attribute 'set_wraparound_loss'");
    let rec = p.last_record();
    let failed = &instance(&rec, "work[precision=a16_w4]")["status"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error_class"], "AttributeError");
    assert_eq!(failed["exit_code"], 1);
}

#[test]
fn a_failure_skips_its_cone_and_exits_1_keep_going_finishes_the_rest() {
    let p = Project::with_logged_pipeline(include_str!("fixtures/keep_going.toml"));
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    // The error line once, when it fails; the summary names the instance and its log.
    assert_contains(&r.stderr, "FAILED  bad  exit code 3");
    assert_eq!(r.stderr.matches("exit code 3").count(), 1, "{}", r.stderr);
    assert_contains(&r.stderr, "\n  bad FAILED\n    log: .heddle/logs/");
    assert_eq!(p.ran(), ["slow"]);
    let rec = p.last_record();
    let after = &instance(&rec, "after")["status"];
    assert_eq!(after["status"], "skipped");
    assert_eq!(after["cause"]["label"], "bad");
    let bad = &instance(&rec, "bad")["status"];
    assert!(
        bad["stderr_tail"].as_str().unwrap().contains("doomed"),
        "{bad}"
    );
}

#[test]
fn timeout_kills_the_group_and_reports() {
    let p = Project::new();
    let pidfile = p.sleeper("timeout = \"1s\"\nretries = 1");
    let r = p.run("p.toml", &[]).code(1);
    assert_contains(&r.stderr, "timed out after 1s");
    assert!(
        r.stderr.contains("attempt 1 failed"),
        "retry announced: {}",
        r.stderr
    );
    let pid = std::fs::read_to_string(pidfile).unwrap().trim().to_string();
    assert!(!alive(&pid), "sleep {pid} survived");
}

#[test]
fn ctrl_c_stops_children_and_exits_130() {
    let p = Project::new();
    let pidfile = p.sleeper("");
    let mut child = p
        .cmd(&["run", "p.toml", "--progress", "plain"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_for_pid(&pidfile, &mut child);
    signal(child.id(), SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!alive(&pid), "sleep {pid} survived");
    let rec = p.last_record();
    assert_eq!(rec["status"], "interrupted", "{rec}");
    // An interrupted stage did not fail: it did not finish.
    let long = &instance(&rec, "long")["status"];
    assert_eq!(long["status"], "skipped");
    assert_eq!(long["error_class"], "Interrupted");
}

#[test]
fn kill_9_mid_run_leaves_a_clean_cache_and_the_next_run_completes() {
    let p = Project::new();
    let log = p.log();
    let mut text = String::from("[pipeline]\nname = \"crash\"\n");
    for i in 0..40 {
        text.push_str(&format!(
            "[stages.s{i}]\nrun = \"head -c 200000 /dev/urandom > {{{{ out.o }}}}; {log}; sleep 0.05\"\noutputs = {{ o = \"o.bin\" }}\n"
        ));
    }
    p.file("p.toml", &text);
    let mut child = p.spawn_run("p.toml", &["-j", "2"]);
    // Killed once a few stages have written their outputs, while the rest are still to come:
    // some results are stored, some half-way, most not started.
    wait_for("four stages to run", Duration::from_secs(60), || {
        p.ran().len() >= 4
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let ran = p.ran().len();
    assert!(ran < 40, "the kill came after all {ran} stages ran");
    let v = p.heddle(&["cache", "verify"]);
    assert_eq!(v.code, 0, "{}", v.all());
    assert_contains(&v.stdout, "cache is clean");
    p.run("p.toml", &[]).ok();
    for i in 0..40 {
        assert_eq!(
            std::fs::metadata(p.path(&format!("out/crash/s{i}/o.bin")))
                .unwrap()
                .len(),
            200000
        );
    }
    p.heddle(&["cache", "verify"]).ok();
}

#[test]
fn concurrent_runs_share_one_cache_and_compute_each_key_once() {
    let p = Project::with_logged_pipeline(include_str!("fixtures/concurrent.toml"));
    let a = p
        .cmd(&["run", "p.toml", "--progress", "quiet"])
        .spawn()
        .unwrap();
    let b = p
        .cmd(&["run", "p.toml", "--progress", "quiet"])
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    assert_eq!(p.read("out/cc/sum/s.txt"), "1\n2\n3\n4\n");
    assert_eq!(p.ran().len(), 4, "each key computed once: {:?}", p.ran());
    p.heddle(&["cache", "verify"]).ok();
}

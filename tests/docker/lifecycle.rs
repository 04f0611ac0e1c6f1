//! Ctrl-C, SIGTERM, timeouts, OOM kills, failures and crashes of a container stage: each ends
//! with the status that says what happened and no container left behind.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::assert_contains;
use crate::support::fill;
use crate::support::process::{signal, wait_ended, wait_for, SIGINT, SIGKILL, SIGTERM};
use crate::support::records::{assert_interrupted, run_id};
use crate::support::{docker, instance, Project};
use crate::{busybox_project, unique, Docker, BUSYBOX};

fn long_stage(script: &str) -> Project {
    Project::with_pipeline(&fill(
        include_str!("fixtures/long_stage.toml"),
        &[("BUSYBOX", BUSYBOX), ("SCRIPT", script)],
    ))
}

/// Start `heddle run`, wait until the container stage has printed `started`, return the
/// child and the run id (after checking the container exists).
fn start_long(d: &Docker, p: &Project) -> (Child, String) {
    let child = p.spawn_run("p.toml", &[]);
    let mut run = None;
    wait_for("the container to start", Duration::from_secs(60), || {
        run = started_run(p, "long");
        run.is_some()
    });
    let run = run.unwrap();
    assert_eq!(d.count("heddle.run", &run), 1, "the stage's container runs");
    assert_eq!(
        d.count("heddle.pid", &child.id().to_string()),
        1,
        "the container names the heddle process that owns it"
    );
    (child, run)
}

/// The run id of the single run under `.heddle/logs/` whose `<label>.out` says `started`.
fn started_run(p: &Project, label: &str) -> Option<String> {
    for e in std::fs::read_dir(p.path(".heddle/logs")).ok()?.flatten() {
        let out = e.path().join(format!("{label}.out"));
        if std::fs::read_to_string(out).is_ok_and(|t| t.contains("started")) {
            return Some(e.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

/// Wait (at most `limit`) for `child` to end; returns its exit code and how long it took.
fn wait_exit(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let t = Instant::now();
    let status = wait_ended(child, limit, "heddle");
    (status.code(), t.elapsed())
}

#[test]
fn ctrl_c_or_sigterm_during_a_container_stage_removes_it_and_exits_130() {
    let (d, _gc) = engine!();
    for (sig, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
        let p = long_stage("echo started; sleep 300; echo late > {{ out.o }}");
        let (mut child, run) = start_long(d, &p);
        signal(child.id(), sig);
        let (code, took) = wait_exit(&mut child, Duration::from_secs(30));
        assert_eq!(code, Some(130), "{name}");
        assert!(took < Duration::from_secs(10), "{name}: took {took:?}");
        assert_eq!(
            d.count("heddle.run", &run),
            0,
            "{name}: a container was left behind"
        );
        assert_interrupted(&p.last_record(), "long", name);
    }
}

#[test]
fn a_second_ctrl_c_kills_a_container_that_ignores_sigterm() {
    let (d, _gc) = engine!();
    // SIGTERM is ignored (and stays ignored across exec), so only the grace period's SIGKILL or
    // a forced removal ends it.
    let p = long_stage("trap '' TERM; echo started; sleep 300");
    let (mut child, run) = start_long(d, &p);
    signal(child.id(), SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), SIGINT);
    let (code, took) = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(code, Some(130));
    assert_eq!(
        d.count("heddle.run", &run),
        0,
        "a container was left behind"
    );
    // The graceful stop would wait out its 3 s grace period.
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

/// Runs the busybox pipeline `pipeline`, whose container stage `label` must fail with
/// `error_class` (heddle exits 1 and prints `headline`) and leave no container behind: what
/// every way a container can fail shares. Returns the project and the instance's record.
fn failing_container_stage(
    d: &Docker,
    pipeline: &str,
    label: &str,
    error_class: &str,
    headline: &str,
) -> (Project, Value) {
    let p = busybox_project(pipeline);
    let r = p.run("p.toml", &[]).code(1);
    assert_contains(&r.stderr, headline);
    let rec = p.last_record();
    let failed = instance(&rec, label).clone();
    assert_eq!(failed["status"]["status"], "failed", "{failed:#}");
    assert_eq!(failed["status"]["error_class"], error_class, "{failed:#}");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
    (p, failed)
}

#[test]
fn a_timeout_stops_the_container_and_reports_it() {
    let (d, _gc) = engine!();
    let t = Instant::now();
    let timeout = include_str!("fixtures/timeout.toml");
    let (p, _) = failing_container_stage(d, timeout, "hang", "Timeout", "timed out after 2s");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(!p.path("out/to/hang/o").exists());
}

#[test]
fn an_oom_kill_is_its_own_status() {
    let (d, _gc) = engine!();
    // dd allocates its 64 MiB block; the limit is 16 MiB with swap off.
    failing_container_stage(
        d,
        include_str!("fixtures/oom.toml"),
        "big",
        "OutOfMemory",
        "killed by the out-of-memory killer",
    );
}

#[test]
fn a_nonzero_exit_reports_the_stderr_tail() {
    let (d, _gc) = engine!();
    let nonzero_exit = include_str!("fixtures/nonzero_exit.toml");
    // The project is kept: the log files the record names are in it.
    let (_project, bad) = failing_container_stage(
        d,
        nonzero_exit,
        "bad",
        "ExitCode",
        "FAILED  bad  exit code 3",
    );
    let status = &bad["status"];
    assert_eq!(status["exit_code"], 3, "{status}");
    assert_eq!(
        status["stderr_tail"], "first complaint\nsecond complaint",
        "{status}"
    );
    let out = std::fs::read_to_string(bad["logs"][0].as_str().unwrap()).unwrap();
    assert_eq!(out, "to stdout\n");
}

#[test]
fn gc_containers_removes_what_a_crashed_run_left() {
    // Exclusive: gc removes every heddle container, including other tests' running ones.
    let (d, _exclusive) = engine!(exclusive);
    // A run killed with SIGKILL cannot remove its container...
    let p = long_stage("echo started; sleep 300");
    let (mut child, run) = start_long(d, &p);
    signal(child.id(), SIGKILL);
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        d.count("heddle.run", &run),
        1,
        "the crashed run's container"
    );
    // ...and one made by hand with the label stands for any other leftover.
    let mark = unique("gc");
    leftover(d, &mark);

    let r = p.heddle(&["gc", "--containers"]).ok();
    let n: usize = r
        .stdout
        .strip_prefix("removed ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(n >= 2, "{}", r.stdout);
    assert_eq!(d.count("heddle.run", &run), 0);
    assert_eq!(d.count("heddle.test.gc", &mark), 0);
}

/// `gc --containers` cleans every engine `hosts.toml` configures, not only the default one:
/// with the default engine unreachable, a leftover is still removed through a configured host
/// (here the same engine over its socket), and the engine it could not reach is reported with
/// exit code 2.
#[test]
fn gc_containers_cleans_each_configured_host_and_reports_an_unreachable_engine() {
    let (d, _exclusive) = engine!(exclusive);
    let p = Project::with_hosts(
        "[hosts.near]\ndocker = \"unix:///var/run/docker.sock\"\npools = { gpu = 1 }\n",
    );
    let mark = unique("gc-host");
    leftover(d, &mark);
    let dead = "unix:///nonexistent/docker.sock";
    let r: crate::support::Run = p
        .cmd(&["gc", "--containers"])
        .env("DOCKER_HOST", dead)
        .output()
        .unwrap()
        .into();
    let r = r.code(2);
    assert!(
        r.stdout.lines().any(|l| l.starts_with("removed ")
            && l.ends_with(" on host near (unix:///var/run/docker.sock)")),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains(dead), "{}", r.stderr);
    assert_eq!(d.count("heddle.test.gc", &mark), 0);
}

/// A container labelled as heddle's that no run owns (`heddle.test.gc=<mark>`), standing for
/// any leftover `gc --containers` must remove.
fn leftover(d: &Docker, mark: &str) {
    docker::cli(&[
        "run",
        "-d",
        "--label",
        "heddle.managed=true",
        "--label",
        &format!("heddle.test.gc={mark}"),
        BUSYBOX,
        "sleep",
        "300",
    ]);
    assert_eq!(d.count("heddle.test.gc", mark), 1);
}

/// A container stage creates a log file only for a stream it wrote to, as the README says (and
/// as the host executor does): a silent stage leaves no empty `.out`/`.err` behind.
#[test]
fn a_container_stage_logs_only_the_streams_it_wrote() {
    let (_d, _gc) = engine!();
    let p = Project::with_pipeline(&format!(
        "[pipeline]\nname = \"logs\"\n[defaults]\nimage = \"{BUSYBOX}\"\n\
         [stages.silent]\nrun = \"echo x > {{{{ out.o }}}}\"\noutputs = {{ o = \"o\" }}\n\
         [stages.talks]\nrun = \"echo said; echo x > {{{{ out.o }}}}\"\noutputs = {{ o = \"o\" }}\n"
    ));
    p.run("p.toml", &[]).ok();
    let mut files: Vec<String> = std::fs::read_dir(p.path(".heddle/logs"))
        .unwrap()
        .flatten()
        .flat_map(|run| std::fs::read_dir(run.path()).unwrap().flatten())
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["talks.out"]);
}

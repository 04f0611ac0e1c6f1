//! Ctrl-C, SIGTERM, timeouts, OOM kills, failures and crashes of a container stage: each ends
//! with the status that says what happened and no container left behind.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::fill;
use crate::support::process::{signal, wait_ended, wait_for, SIGINT, SIGKILL, SIGTERM};
use crate::support::records::run_id;
use crate::support::{docker, instance, Project};
use crate::{busybox_project, engine_or_skip, setup, unique, Docker, BUSYBOX, DOCKER, GC};

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
    let Some((d, _gc)) = engine_or_skip("ctrl_c_or_sigterm_during_a_container_stage") else {
        return;
    };
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
        let rec = p.last_record();
        assert_eq!(rec["status"], "interrupted", "{name}");
        assert_eq!(
            instance(&rec, "long")["status"]["error_class"],
            "Interrupted",
            "{name}"
        );
    }
}

#[test]
fn a_second_ctrl_c_kills_a_container_that_ignores_sigterm() {
    let Some((d, _gc)) = engine_or_skip("a_second_ctrl_c_kills_a_container_that_ignores_sigterm")
    else {
        return;
    };
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

#[test]
fn a_timeout_stops_the_container_and_reports_it() {
    let Some((d, _gc)) = engine_or_skip("a_timeout_stops_the_container_and_reports_it") else {
        return;
    };
    let p = busybox_project(include_str!("fixtures/timeout.toml"));
    let t = Instant::now();
    let r = p.run("p.toml", &[]).code(1);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(r.stderr.contains("timed out after 2s"), "{}", r.stderr);
    let rec = p.last_record();
    let status = &instance(&rec, "hang")["status"];
    assert_eq!(status["status"], "failed");
    assert_eq!(status["error_class"], "Timeout");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
    assert!(!p.path("out/to/hang/o").exists());
}

#[test]
fn an_oom_kill_is_its_own_status() {
    let Some((d, _gc)) = engine_or_skip("an_oom_kill_is_its_own_status") else {
        return;
    };
    // dd allocates its 64 MiB block; the limit is 16 MiB with swap off.
    let p = busybox_project(include_str!("fixtures/oom.toml"));
    let r = p.run("p.toml", &[]).code(1);
    assert!(
        r.stderr.contains("killed by the out-of-memory killer"),
        "{}",
        r.stderr
    );
    let rec = p.last_record();
    let status = &instance(&rec, "big")["status"];
    assert_eq!(status["error_class"], "OutOfMemory", "{status}");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
}

#[test]
fn a_nonzero_exit_reports_the_stderr_tail() {
    let Some((d, _gc)) = engine_or_skip("a_nonzero_exit_reports_the_stderr_tail") else {
        return;
    };
    let p = busybox_project(include_str!("fixtures/nonzero_exit.toml"));
    let r = p.run("p.toml", &[]).code(1);
    assert!(r.stderr.contains("bad FAILED exit code 3"), "{}", r.stderr);
    let rec = p.last_record();
    let status = &instance(&rec, "bad")["status"];
    assert_eq!(status["exit_code"], 3, "{status}");
    assert_eq!(status["error_class"], "ExitCode", "{status}");
    assert_eq!(
        status["stderr_tail"], "first complaint\nsecond complaint",
        "{status}"
    );
    let logs = &instance(&rec, "bad")["logs"];
    let out = std::fs::read_to_string(logs[0].as_str().unwrap()).unwrap();
    assert_eq!(out, "to stdout\n");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
}

#[test]
fn gc_containers_removes_what_a_crashed_run_left() {
    // Exclusive: gc removes every heddle container, including other tests' running ones.
    let _exclusive = GC.write().unwrap_or_else(|e| e.into_inner());
    let Some(d) = DOCKER.get_or_init(setup).as_ref().ok() else {
        let _ = engine_or_skip("gc_containers_removes_what_a_crashed_run_left");
        return;
    };
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
    let _exclusive = GC.write().unwrap_or_else(|e| e.into_inner());
    let Some(d) = DOCKER.get_or_init(setup).as_ref().ok() else {
        let _ = engine_or_skip("gc_containers_cleans_each_configured_host");
        return;
    };
    let p = Project::new();
    p.file(
        ".heddle/hosts.toml",
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

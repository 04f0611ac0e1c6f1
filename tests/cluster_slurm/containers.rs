//! Container stages through SLURM: each job's worker runs the stage's image on its node's
//! Docker engine, and owns the container's lifetime.

use std::time::Duration;

use super::{fixture, setup, SERIAL};
use crate::support;
use crate::support::instance;
use crate::support::process::{signal, wait_ended, wait_for, SIGINT};

#[test]
fn container_stages_run_on_the_node_s_engine_and_ctrl_c_leaves_no_container() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !support::docker::image_ready(
        &support::docker::current_test(),
        "heddle-test/busybox:latest",
        "tests/images/build-busybox.sh",
    ) {
        return;
    }
    let Some(s) = setup("container stages through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    s.p.file("boxed.toml", &fixture("boxed.toml"));
    s.run("boxed.toml", &[]).ok();
    assert_eq!(s.p.read("out/boxed/use/r.txt"), "in a boxin a box");
    let rec = s.record();
    assert_eq!(instance(&rec, "use")["job"]["engine"], "slurm");
    assert!(instance(&rec, "use")["image"]["id"]
        .as_str()
        .is_some_and(|i| i.starts_with("sha256:")));

    s.p.file("boxed-wait.toml", &fixture("boxed-wait.toml"));
    let mut child = s
        .run_cmd("boxed-wait.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // By instance label: other suites may run busybox containers on this engine meanwhile.
    let sleepers = |state: &str| {
        ["wait[i=1]", "wait[i=2]"]
            .iter()
            .map(|l| {
                support::docker::cli(&[
                    "ps",
                    "-aq",
                    "--filter",
                    &format!("status={state}"),
                    "--filter",
                    &format!("label=heddle.instance={l}"),
                ])
                .lines()
                .count()
            })
            .sum::<usize>()
    };
    let running_ids = || {
        let mut ids: Vec<String> = ["wait[i=1]", "wait[i=2]"]
            .iter()
            .flat_map(|l| {
                support::docker::cli(&[
                    "ps",
                    "-q",
                    "--filter",
                    &format!("label=heddle.instance={l}"),
                ])
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
            })
            .collect();
        ids.sort();
        ids
    };
    wait_for("both sleepers' containers", Duration::from_secs(90), || {
        running_ids().len() == 2
    });
    // SIGKILL to every process of the jobs: the workers die without stopping their
    // containers, which only the cluster's epilog removes; heddle resubmits the lost jobs.
    let first = running_ids();
    let jobs: Vec<String> = s
        .slurm
        .jobs()
        .into_iter()
        .filter(|j| j[2] == "RUNNING")
        .map(|j| j[0].clone())
        .collect();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let killed = s
        .slurm
        .cmd("scancel")
        .args(["--signal=KILL", "--full"])
        .args(&jobs)
        .status()
        .unwrap();
    assert!(killed.success());
    wait_for("the resubmitted sleepers", Duration::from_secs(90), || {
        let now = running_ids();
        now.len() == 2 && now.iter().all(|id| !first.contains(id))
    });
    signal(child.id(), SIGINT);
    let status = wait_ended(&mut child, Duration::from_secs(90), "heddle after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    assert_eq!(
        sleepers("running") + sleepers("exited") + sleepers("created"),
        0
    );
}

//! Container stages store and restore their outputs, a cache hit creates no container, and the
//! image id (not the tag) enters the key.

use std::process::{Command, Stdio};

use heddle_containers::test_images;
use serde_json::Value;

use crate::events::run_watched;
use crate::support::assert_contains;
use crate::support::fill;
use crate::support::{docker, instance, Project};
use crate::{unique, BUSYBOX};

#[test]
fn container_outputs_are_stored_and_restored_without_running_again() {
    let (p, _d, _gc) = busybox_test!(include_str!("fixtures/stored_and_restored.toml"));
    assert_eq!(run_watched(&p).created, ["up"]);
    assert_eq!(p.read("out/st/up/u.txt"), "HELLO\n");
    assert_eq!(p.read("out/st/up/tree/leaf.txt"), "leaf\n");

    std::fs::remove_file(p.path("out/st/up/u.txt")).unwrap();
    std::fs::remove_dir_all(p.path("out/st/up/tree")).unwrap();
    let restore = run_watched(&p);
    assert!(
        restore.created.is_empty(),
        "a restore must not create a container"
    );
    assert_eq!(instance(&restore.record, "up")["cached"], true);
    assert_eq!(p.read("out/st/up/u.txt"), "HELLO\n");
    assert_eq!(p.read("out/st/up/tree/leaf.txt"), "leaf\n");
}

#[test]
fn a_cache_hit_creates_no_container() {
    let (p, d, _gc) = busybox_test!(include_str!("fixtures/cache_hit.toml"));
    let first = run_watched(&p);
    assert_eq!(
        first.created,
        ["gen[k=1]", "gen[k=2]"],
        "the first run creates one container per container instance"
    );
    assert_eq!(
        d.count("heddle.run", &first.id()),
        0,
        "containers are removed after they ran"
    );
    assert_eq!(p.read("out/hit/sum/s.txt"), "1\n2\n");

    let second = run_watched(&p);
    assert_contains(&second.run.stderr, "0 ran, 3 cached");
    assert_ne!(first.id(), second.id());
    assert!(
        second.created.is_empty(),
        "a cache hit must not create a container"
    );
}

fn short12(id: &str) -> &str {
    &id.trim_start_matches("sha256:")[..12]
}

/// Untags the reference when the test ends, however it ends.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn retagging_an_image_reruns_exactly_the_stages_that_use_it() {
    let (d, _gc) = engine!();
    let tag = Tag(format!("heddle-test/retag:{}", unique("docker")));
    docker::cli(&["tag", BUSYBOX, &tag.0]);
    let p = Project::with_pipeline(&fill(
        include_str!("fixtures/retag.toml"),
        &[("TAG", &tag.0), ("BUSYBOX", BUSYBOX)],
    ));
    p.run("p.toml", &[]).ok();
    let rec = p.last_record();
    let image = &instance(&rec, "moving")["image"];
    assert_eq!(image["reference"], tag.0.as_str(), "{image}");
    assert_eq!(image["id"], d.busybox.id.as_str(), "{image}");
    assert!(!p.read("out/rt/moving/ls.txt").contains("moved.txt"));

    docker::cli(&["tag", test_images::BUSYBOX_MOVED, &tag.0]);
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    let line = |label: &str| plan.plan_line(label).to_string();
    let want = format!(
        "image changed ({} → {})",
        short12(&d.busybox.id),
        short12(&d.moved.id)
    );
    assert!(line("moving").starts_with("run"), "{}", plan.stdout);
    assert!(
        line("moving").contains(&want),
        "want `{want}`:\n{}",
        plan.stdout
    );
    assert!(line("fixed").starts_with("cached"), "{}", plan.stdout);
    assert!(line("host").starts_with("cached"), "{}", plan.stdout);

    let rerun = run_watched(&p);
    assert_eq!(rerun.created, ["moving"]);
    let rec = rerun.record;
    let image = &instance(&rec, "moving")["image"];
    assert_eq!(image["reference"], tag.0.as_str(), "{image}");
    assert_eq!(image["id"], d.moved.id.as_str(), "{image}");
    assert!(p.read("out/rt/moving/ls.txt").contains("moved.txt"));
    assert_eq!(instance(&rec, "fixed")["cached"], true);
    assert_eq!(instance(&rec, "host")["cached"], true);
}

#[test]
fn the_mixed_example_pipeline_runs() {
    let (_d, _gc) = engine!();
    let p = Project::new();
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/mixed.toml"))
            .unwrap();
    p.file("pipelines/mixed.toml", &text);
    let r = p.run("pipelines/mixed.toml", &[]).ok();
    assert_contains(&r.stderr, "3 ran, 0 cached");
    let report = p.read("out/mixed/report/report.md");
    assert!(report.starts_with("# Word counts"), "{report}");
    assert_contains(&report, "| the | 2 |");
    let rec = p.last_record();
    assert!(instance(&rec, "count")["image"]["id"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(instance(&rec, "write")["image"], Value::Null);
    let r = p.run("pipelines/mixed.toml", &[]).ok();
    assert_contains(&r.stderr, "0 ran, 3 cached");
}

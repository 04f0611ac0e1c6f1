//! What a run leaves to read: `heddle runs`, `heddle show`, cache keys that do not depend on
//! where the project or the cache lives, and the facts a stage reports.

use crate::caching::chain_project;
use crate::support::assert_contains;
use crate::support::{instance, Project};

#[test]
fn runs_and_show_list_what_happened() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.run("p.toml", &[]).ok();
    let runs = p.heddle(&["runs"]).ok();
    assert_eq!(runs.stdout.lines().count(), 2, "{}", runs.stdout);
    let show = p.heddle(&["show", "last"]).ok();
    assert_contains(&show.stdout, "cached 4");
    let v = p.last_record();
    assert_eq!(v["status"], "completed");
    let a = instance(&v, "a");
    assert_eq!(a["cache_key"].as_str().unwrap().len(), 64);
    assert!(a["inputs"]["src"].as_str().unwrap().len() == 64);
}

#[test]
fn cache_keys_do_not_depend_on_checkout_or_cache_dir() {
    let p1 = chain_project();
    let p2 = chain_project();
    let keys = |p: &Project, pipeline: &str| {
        let r = p.heddle(&["plan", pipeline, "--json"]).ok();
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].clone())
            .collect::<Vec<_>>()
    };
    // The contrast that makes the check mean something: the chain's commands name a
    // project-specific log path, and a command is part of the key (of `a` and `b`; their
    // downstream keys are not known before they run).
    assert_ne!(keys(&p1, "p.toml"), keys(&p2, "p.toml"));
    let text = "[pipeline]\nname = \"k\"\n[stages.a]\ninputs = { i = { path = \"d.txt\" } }\nrun = \"cat {{ in.i }} > {{ out.o }}\"\noutputs = { o = \"o\" }\n";
    p1.file("k.toml", text).file("d.txt", "same\n");
    p2.file("k.toml", text).file("d.txt", "same\n");
    let k1 = keys(&p1, "k.toml");
    assert!(k1.len() == 1 && k1[0].is_string(), "{k1:?}");
    assert_eq!(k1, keys(&p2, "k.toml"));
    // The whole plan, not only the keys, is free of where the project lives.
    let plan = |p: &Project| p.heddle(&["plan", "k.toml", "--json"]).ok().stdout;
    assert_eq!(plan(&p1), plan(&p2));
}

#[test]
fn facts_a_stage_reports_land_in_the_run_record() {
    let p = Project::with_pipeline(include_str!("fixtures/facts.toml"));
    p.run("p.toml", &[]).ok();
    let v = p.last_record();
    assert_eq!(
        instance(&v, "deploy")["facts"]["device"]["firmware"],
        "5.3.2"
    );
}

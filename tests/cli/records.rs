//! What a run leaves to read: `heddle runs`, `heddle show`, cache keys that do not depend on
//! where the project or the cache lives, and the facts a stage reports.

use super::caching::chain_project;
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

/// A no-op run of a matrix writes a record of a few bytes per instance that refers to the
/// full run's record (format 2), leaves the lock file alone (same inode, mtime and bytes), and
/// reads back as every instance of the full run, served from the cache.
#[test]
fn a_no_op_run_writes_next_to_nothing_and_reads_back_whole() {
    use std::os::unix::fs::MetadataExt;
    let values: Vec<String> = (0..300).map(|i| i.to_string()).collect();
    let p = Project::with_pipeline(&format!(
        "[pipeline]\nname = \"m\"\n[stages.m]\nmatrix = {{ i = [{}] }}\n\
         run = \"echo {{{{ matrix.i }}}} > {{{{ out.o }}}}\"\noutputs = {{ o = \"o.txt\" }}\n",
        values.join(", ")
    ));
    p.run("p.toml", &[]).ok();
    let full = p.last_record();
    let lock = p.path("p.lock");
    let lock_text = std::fs::read(&lock).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let inode = std::fs::metadata(&lock).unwrap().ino();
    p.run("p.toml", &[]).ok();
    let meta = std::fs::metadata(&lock).unwrap();
    assert_eq!(meta.ino(), inode, "the lock was not replaced");
    assert_eq!(meta.modified().unwrap(), old, "the lock was not written");
    assert_eq!(std::fs::read(&lock).unwrap(), lock_text);

    let runs = p.path(".heddle/runs");
    let ids = heddle_runner::record::list(p.root());
    assert_eq!(ids.len(), 2);
    let text = |id: &str| std::fs::read_to_string(runs.join(format!("{id}.json"))).unwrap();
    let (whole, noop) = (text(&ids[0]), text(&ids[1]));
    assert!(
        !whole.starts_with("{\"record_format\""),
        "the full run is format 1"
    );
    let base = format!("{{\"record_format\":2,\"base\":\"{}\"", ids[0]);
    assert!(noop.starts_with(&base), "{}", &noop[..100]);
    assert!(
        noop.len() * 20 < whole.len(),
        "{} vs {}",
        noop.len(),
        whole.len()
    );

    let v = p.last_record();
    let (a, b) = (
        full["instances"].as_array().unwrap(),
        v["instances"].as_array().unwrap(),
    );
    assert_eq!(a.len(), 300);
    assert_eq!(b.len(), 300);
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x[0], y[0]);
        let (x, y) = (&x[1], &y[1]);
        assert_eq!(y["cached"], true, "{y}");
        assert_eq!(y["reason"], "cached");
        for field in [
            "cache_key",
            "key_parts",
            "inputs",
            "outputs",
            "output_paths",
        ] {
            assert_eq!(x[field], y[field], "{field}");
        }
    }
    assert_contains(&p.heddle(&["show", "last"]).ok().stdout, "cached 300");
    // A third no-op refers to the same base; diff and status read both.
    p.run("p.toml", &[]).ok();
    assert!(text(&heddle_runner::record::list(p.root())[2]).starts_with(&base));
    p.heddle(&["diff"]).ok();
    p.heddle(&["status", "p.toml", "--check"]).ok();
}

/// The record keeps why an instance ran typed (`why`), as `plan --json` has it, beside the
/// sentence every reader shows; a hit has none (its `cached` says it).
#[test]
fn the_record_says_why_an_instance_ran_typed() {
    let text = |n: u32| {
        format!(
            "[pipeline]\nname = \"w\"\n[params]\nn = {n}\n\
             [stages.a]\nrun = \"echo {{{{ params.n }}}} > {{{{ out.o }}}}\"\noutputs = {{ o = \"o\" }}\n"
        )
    };
    let p = Project::with_pipeline(&text(1));
    p.run("p.toml", &[]).ok();
    let a = instance(&p.last_record(), "a").clone();
    assert_eq!(a["why"], serde_json::json!({"kind": "never_run"}));
    assert_eq!(a["reason"], "never run");
    p.run("p.toml", &[]).ok();
    let hit = instance(&p.last_record(), "a").clone();
    assert!(hit.get("why").is_none(), "{hit}");
    p.file("p.toml", &text(2));
    p.run("p.toml", &[]).ok();
    let a = instance(&p.last_record(), "a").clone();
    assert_eq!(
        a["why"],
        serde_json::json!({"kind": "changed", "changes": [
            {"kind": "param", "name": "n", "old": 1, "new": 2}
        ]})
    );
    assert_eq!(a["reason"], "param n 1 → 2");
}

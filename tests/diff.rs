//! `heddle_report::diff` over real run records: the built binary runs a small pipeline with a
//! report table and a facts file twice, the second time with `--set scale=5`, and the library
//! compares the two records and their tables as `heddle diff` will.

use crate::support;

use heddle_cache::Store;
use heddle_report::artefacts;
use heddle_report::diff::{diff, InstanceDelta, ParamChange, Presence, RunDiff, RunSide};
use heddle_runner::key::Change;
use heddle_runner::record::{self, RunRecord};
use serde_json::json;
use support::assert_contains;
use support::Project;

fn project() -> Project {
    let p = Project::new();
    p.file("data/seed.txt", "3\n")
        .file("p.toml", include_str!("fixtures/diff/project.toml"));
    p
}

/// The last `n` runs' records, oldest first, with their report tables.
fn runs(p: &Project, n: usize) -> Vec<(RunRecord, Vec<heddle_report::entry::Table>)> {
    let store = Store::open(&p.root().join("cache")).unwrap();
    let ids = record::list(p.root());
    ids[ids.len() - n..]
        .iter()
        .map(|id| {
            let rec = record::load(p.root(), id).unwrap();
            let tables = artefacts::tables(&store, p.root(), &rec);
            (rec, tables)
        })
        .collect()
}

fn diff_last_two(p: &Project) -> RunDiff {
    let r = runs(p, 2);
    diff(
        RunSide {
            record: &r[0].0,
            tables: &r[0].1,
        },
        RunSide {
            record: &r[1].0,
            tables: &r[1].1,
        },
    )
}

#[test]
fn a_set_change_names_the_param_why_keys_changed_and_the_moved_numbers() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.run("p.toml", &["--set", "scale=5"]).ok();
    let d = diff_last_two(&p);

    assert_eq!(
        d.params,
        [ParamChange {
            name: "scale".into(),
            a: Some(json!(2)),
            b: Some(json!(5)),
        }]
    );
    let keyed: Vec<(&str, &InstanceDelta)> = d
        .instances
        .iter()
        .map(|i| (i.label.as_str(), &i.delta))
        .collect();
    let scale = Change::Param {
        name: "scale".into(),
        old: Some(json!(2)),
        new: Some(json!(5)),
    };
    assert_eq!(
        keyed,
        [
            (
                "gen[k=1]",
                &InstanceDelta::KeyChanged {
                    changes: vec![scale.clone()]
                }
            ),
            (
                "gen[k=2]",
                &InstanceDelta::KeyChanged {
                    changes: vec![scale.clone()]
                }
            ),
            (
                "table",
                &InstanceDelta::KeyChanged {
                    changes: vec![scale, Change::Input { name: "all".into() }]
                }
            ),
        ]
    );

    let text = |all| {
        d.text(all)
            .replace(&d.a.run_id, "RUN_A")
            .replace(&d.b.run_id, "RUN_B")
    };
    // By default only what moved.
    assert_eq!(
        text(false),
        r#"run A RUN_A → run B RUN_B (pipeline df)

params: 1 changed
  scale  2  →  5

instances: 3 changed
  gen[k=1]  param scale 2 → 5
  gen[k=2]  param scale 2 → 5
  table     param scale 2 → 5; input all changed

table table#md: 4 numbers, 2 moved
     where                  A     B      B − A
  *  row "k=1" col "value"  5.25  8.25   +3 (+57.1%)
  *  row "k=2" col "value"  7.25  13.25  +6 (+82.8%)

facts: 1 changed
  table  device.scale  2  →  5
"#
    );
    assert_eq!(
        text(true),
        r#"run A RUN_A → run B RUN_B (pipeline df)

params: 1 changed
  scale  2  →  5

instances: 3 changed
  gen[k=1]  param scale 2 → 5
  gen[k=2]  param scale 2 → 5
  table     param scale 2 → 5; input all changed

table table#md: 4 numbers, 2 moved
     where                  A     B      B − A
  *  row "k=1" col "value"  5.25  8.25   +3 (+57.1%)
     row "k=1" col "ratio"  1.5x  1.5x   0
  *  row "k=2" col "value"  7.25  13.25  +6 (+82.8%)
     row "k=2" col "ratio"  1.5x  1.5x   0

facts: 1 changed
  table  device.scale  2  →  5
"#
    );

    let j = serde_json::to_value(&d).unwrap();
    assert_eq!(j["params"][0], json!({"name": "scale", "a": 2, "b": 5}));
    assert_eq!(j["tables"][0]["presence"], "both");
    assert_eq!(
        j["tables"][0]["numbers"][0],
        json!({"place": "row \"k=1\" col \"value\"", "a": "5.25", "b": "8.25",
               "delta": 3.0, "relative": 3.0 / 5.25, "moved": true})
    );
    assert_eq!(
        j["instances"][2]["delta"]["changes"][1],
        json!({"kind": "input", "name": "all"})
    );
}

#[test]
fn a_rerun_with_nothing_changed_moves_nothing() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.run("p.toml", &[]).ok();
    let d = diff_last_two(&p);
    assert!(
        d.params.is_empty() && d.instances.is_empty() && d.facts.is_empty(),
        "{}",
        d.text(true)
    );
    assert_eq!(d.tables.len(), 1);
    assert_eq!(d.tables[0].presence, Presence::Both);
    assert_eq!(d.tables[0].numbers.len(), 4);
    assert_eq!(d.moved().count(), 0);
    // Nothing moved: one line per table, no rows; `--all` prints the four numbers.
    let out = p.heddle(&["diff"]).ok();
    assert_contains(&out.stdout, "\ntable table#md: 4 numbers, 0 moved\n");
    assert!(!out.stdout.contains("row \"k=1\""), "{}", out.stdout);
    let out = p.heddle(&["diff", "--all"]).ok();
    assert_contains(&out.stdout, "row \"k=1\" col \"value\"  5.25  5.25  0");
}

#[test]
fn heddle_diff_after_a_set_change_names_the_param_and_the_moved_numbers() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.run("p.toml", &["--set", "scale=5"]).ok();
    let ids = record::list(p.root());
    // Default: the last run against the one before it, as the library computes it.
    let out = p.heddle(&["diff"]).ok();
    let expected = diff_last_two(&p).text(false);
    assert_eq!(out.stdout, expected);
    assert_contains(&out.stdout, "  scale  2  →  5\n");
    assert_contains(&out.stdout, "4 numbers, 2 moved");
    // Named runs, as JSON.
    let out = p.heddle(&["diff", &ids[0], &ids[1], "--json"]).ok();
    let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(j["params"][0], json!({"name": "scale", "a": 2, "b": 5}));
    assert_eq!(j["a"]["run_id"], ids[0].as_str());
}

#[test]
fn heddle_diff_with_one_run_says_what_to_do() {
    let p = project();
    p.run("p.toml", &[]).ok();
    let out = p.heddle(&["diff"]).code(2);
    assert!(
        out.stderr
            .starts_with("error: no run of pipeline df before run "),
        "{}",
        out.stderr
    );
}

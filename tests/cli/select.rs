//! `heddle run PIPELINE STAGE...` (only those stages and what they need), `--strict`, and the
//! last line of a run whose allowed failures left a whole sweep with no result.

use crate::support::{assert_contains, Project};

const CHAIN: &str = r#"
[pipeline]
name = "chain"

[stages.a]
run = "__LOG__; echo a > {{ out.o }}"
outputs = { o = "a.txt" }

[stages.b]
inputs = { i = "a.o" }
run = "__LOG__; cat {{ in.i }} > {{ out.o }}"
outputs = { o = "b.txt" }

[stages.side]
run = "__LOG__; echo side > {{ out.o }}"
outputs = { o = "side.txt" }

[stages.c]
inputs = { i = "b.o", s = "side.o" }
run = "__LOG__; cat {{ in.i }} {{ in.s }} > {{ out.o }}"
outputs = { o = "c.txt" }
"#;

#[test]
fn run_stage_runs_it_and_what_it_needs_and_leaves_the_lock() {
    let p = Project::with_logged_pipeline(CHAIN);
    let r = p.run("p.toml", &["b"]).ok();
    assert_eq!(p.ran(), ["a", "b"]);
    assert_contains(
        &r.stderr,
        "lock: p.lock left as it was (this run ran only b and what it needs)",
    );
    assert!(!p.path("p.lock").exists());
    // --until says the same; the whole run then reuses what the partial one stored.
    p.clear_ran();
    p.run("p.toml", &["--until", "b"]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["c", "side"]);
    assert!(p.path("p.lock").exists());
}

#[test]
fn an_unknown_stage_says_the_nearest_name() {
    let p = Project::with_logged_pipeline(CHAIN);
    let r = p.run("p.toml", &["sid"]).code(2);
    assert_eq!(
        r.stderr,
        "error: no stage `sid` in pipeline `chain` (did you mean `side`?)\n"
    );
    let r = p.run("p.toml", &["zzzzzz"]).code(2);
    assert_eq!(
        r.stderr,
        "error: no stage `zzzzzz` in pipeline `chain` (stages: a, b, side, c)\n"
    );
}

const SWEEP: &str = r#"
[pipeline]
name = "sweep"

[stages.opt]
matrix = { p = ["x", "y"] }
run = "exit 3"
outputs = { o = "o.txt" }
allow_failure = true

[stages.ok]
run = "echo fine > {{ out.o }}"
outputs = { o = "ok.txt" }
"#;

#[test]
fn allowed_failures_that_eat_a_sweep_say_so_last_and_strict_exits_1() {
    let p = Project::with_pipeline(SWEEP);
    let r = p.run("p.toml", &[]).ok();
    assert_eq!(
        r.stderr.lines().last().unwrap(),
        "warning: allowed failures left no result at all from opt (2 of 2 failed): the run completed without them (exit 0; --strict makes any failure exit 1)"
    );
    let r = p.run("p.toml", &["--strict"]).code(1);
    assert_eq!(
        r.stderr.lines().last().unwrap(),
        "warning: allowed failures left no result at all from opt (2 of 2 failed): the run completed without them (exit 1 (--strict))"
    );
}

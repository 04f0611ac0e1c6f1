//! Input paths from params (`inputs = { m = { path = "{{ params.model }}" } }`): rendered after
//! `--set` and per matrix value, so one pipeline runs another model with `--set model=...` or a
//! matrix over models; a rendered path that does not exist names the param it came from.

use crate::support::project::Project;
use crate::support::records::instances;
use crate::support::snapshot::normalise;

const ONE: &str = r#"[pipeline]
name = "p"

[params]
model = "models/a.txt"

[stages.s]
inputs = { m = { path = "{{ params.model }}" } }
run = "cat {{ in.m }} > {{ out.o }}"
outputs = { o = "o.txt" }
"#;

fn project(pipeline: &str) -> Project {
    let p = Project::with_pipeline(pipeline);
    p.file("models/a.txt", "model a\n");
    p.file("models/b.txt", "model b\n");
    p
}

#[test]
fn a_path_from_a_param_follows_set() {
    let p = project(ONE);
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/p/s/o.txt"), "model a\n");
    p.run("p.toml", &["--set", "model=models/b.txt"]).ok();
    assert_eq!(p.read("out/p/s/o.txt"), "model b\n");
    // Back to a: the same key as the first run, served from the cache.
    let again = p.run("p.toml", &[]).ok();
    assert!(again.stderr.contains("cached  s"), "{}", again.stderr);
    assert_eq!(p.read("out/p/s/o.txt"), "model a\n");
}

#[test]
fn a_missing_rendered_path_names_its_param() {
    let p = project(ONE);
    let r = p.run("p.toml", &["--set", "model=models/c.txt"]).code(2);
    assert_eq!(
        normalise(&p, &r.stderr),
        "error: input `m` of s: `models/c.txt` (from param `model`) does not exist\n\
         \x20 --> p.toml:8:16\n\
         \x20 |\n\
         8 | inputs = { m = { path = \"{{ params.model }}\" } }\n\
         \x20 |                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n\
         \x20 = help: --set model=PATH, relative to the project root [PROJECT]\n"
    );
    let r = p.run("p.toml", &["--set", "model="]).code(2);
    assert!(
        r.stderr
            .starts_with("error: input `m` of s: its path renders empty (from param `model`)\n"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_matrix_over_models_runs_each_and_names_the_key_of_a_missing_one() {
    let matrix = r#"[pipeline]
name = "p"

[stages.s]
matrix = { model = ["models/a.txt", "models/b.txt"] }
inputs = { m = { path = "{{ matrix.model }}" } }
run = "cat {{ in.m }} > {{ out.o }}"
outputs = { o = "o.txt" }

[stages.all]
inputs = { each = "s[*].o" }
run = "cat {{ in.each }} > {{ out.o }}"
outputs = { o = "all.txt" }
"#;
    let p = project(matrix);
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/p/all/all.txt"), "model a\nmodel b\n");
    let labels: Vec<String> = instances(&p.last_record()).into_keys().collect();
    assert_eq!(
        labels,
        ["all", "s[model=models/a.txt]", "s[model=models/b.txt]"]
    );
    p.file("p.toml", &matrix.replace("models/b.txt", "models/z.txt"));
    let r = p.run("p.toml", &[]).code(2);
    assert!(
        r.stderr.starts_with(
            "error: input `m` of s[model=models/z.txt]: `models/z.txt` (from matrix key `model`) does not exist\n"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("= help: paths are relative to the project root"),
        "{}",
        r.stderr
    );
}

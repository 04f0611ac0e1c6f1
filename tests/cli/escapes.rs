//! Text a user or a stage wrote reaches the terminal escaped (`\x1b`), never raw, from every
//! command that prints it: one test per command, over a matrix value and a param holding a
//! terminal title sequence, a CSI and a carriage return. And `heddle init` never writes
//! through a link it did not create.

use crate::support::{assert_contains, Project, Run};

const PIPELINE: &str = "[pipeline]\nname = \"e\"\n[params]\np = \"plain\"\n[stages.a]\nmatrix = { k = [\"x\\u001b]0;pwned\\u0007y\", \"z\\r\\u009b2J\"] }\nreport = true\nrun = \"printf '| k | v |\\\\n|---|---|\\\\n| %s | 1 |\\\\n' {{ matrix.k }} > {{ out.t }}; echo {{ params.p }} >> {{ out.t }}\"\noutputs = { t = \"t.md\" }\n";

/// A param value that would recolour the terminal and clear it.
const HOSTILE_PARAM: &str = "p=\u{1b}[31mred\u{1b}[2J\r";

/// Nothing raw, and the escaped form is there (the text was shown, not dropped).
#[track_caller]
fn escaped(what: &str, r: &Run) {
    let all = r.all();
    for raw in ['\u{1b}', '\u{7}', '\r', '\u{9b}'] {
        assert!(
            !all.contains(raw),
            "{what} printed {raw:?} raw:\n{}",
            all.escape_debug()
        );
    }
    assert_contains(&all, "\\x1b");
}

fn heddle(p: &Project, args: &[&str]) -> Run {
    p.cmd(args).env("NO_COLOR", "1").output().unwrap().into()
}

#[test]
fn plan_escapes_labels_and_reasons() {
    let p = Project::with_pipeline(PIPELINE);
    escaped("plan", &heddle(&p, &["plan", "p.toml"]).ok());
    heddle(&p, &["run", "p.toml", "--progress", "plain"]).ok();
    let r = heddle(&p, &["plan", "p.toml", "--set", HOSTILE_PARAM]).ok();
    escaped("plan after a change", &r);
    assert_contains(&r.stdout, "param p plain → \\x1b[31mred\\x1b[2J\\x0d");
}

#[test]
fn dag_escapes_labels_as_text_and_dot() {
    let p = Project::with_pipeline(PIPELINE);
    escaped("dag", &heddle(&p, &["dag", "p.toml"]).ok());
    escaped(
        "dag --format dot",
        &heddle(&p, &["dag", "p.toml", "--format", "dot"]).ok(),
    );
}

#[test]
fn status_escapes_labels_and_reasons() {
    let p = Project::with_pipeline(PIPELINE);
    heddle(&p, &["run", "p.toml", "--progress", "plain"]).ok();
    let r = heddle(&p, &["status", "p.toml", "--set", HOSTILE_PARAM]).ok();
    escaped("status", &r);
    assert_contains(&r.stdout, "changed  a[k=x\\x1b]0;pwned\\x07y]");
}

#[test]
fn run_show_runs_and_diff_escape_what_the_records_hold() {
    let p = Project::with_pipeline(PIPELINE);
    escaped(
        "run",
        &heddle(&p, &["run", "p.toml", "--progress", "plain"]).ok(),
    );
    escaped(
        "run with a param",
        &heddle(
            &p,
            &[
                "run",
                "p.toml",
                "--progress",
                "plain",
                "--set",
                HOSTILE_PARAM,
            ],
        )
        .ok(),
    );
    escaped("show", &heddle(&p, &["show"]).ok());
    let runs = heddle(&p, &["runs"]).ok();
    escaped("runs", &runs);
    assert_contains(&runs.stdout, "p=plain→\\x1b[31mred");
    escaped("diff", &heddle(&p, &["diff"]).ok());
}

#[test]
fn logbook_verify_escapes_params_and_cells() {
    // No `\r` in a label here: an entry's block names its table by label, one line.
    let p = Project::with_pipeline(&PIPELINE.replace(", \"z\\r\\u009b2J\"", ""));
    heddle(
        &p,
        &[
            "run",
            "p.toml",
            "--progress",
            "plain",
            "--set",
            HOSTILE_PARAM,
        ],
    )
    .ok();
    heddle(&p, &["logbook", "new", "-o", "e.md"]).ok();
    let v = heddle(&p, &["logbook", "verify", "e.md"]).ok();
    escaped("logbook verify", &v);
    assert_contains(&v.stdout, "params  p = \\x1b[31mred\\x1b[2J\\x0d  (entry)");
}

#[test]
fn stages_show_and_errors_escape_the_users_text() {
    let p = Project::new();
    p.file(
        "stages/g/d/stage.toml",
        "[stage]\ndescription = \"evil \\u001b]0;title\\u0007 description\"\nrun = \"true\"\n",
    );
    escaped("stages show", &heddle(&p, &["stages", "show", "g/d"]).ok());
    escaped("stages list", &heddle(&p, &["stages", "list"]).ok());
    p.file("p.toml", PIPELINE);
    let r = heddle(&p, &["plan", "p.toml", "--set", "nope=\u{1b}[2J"]).code(2);
    escaped("an error", &r);
}

/// `heddle init` in a folder where a file it would write is a dangling link, or a folder it
/// would write into is a link: exit 2, and nothing is created where the links point.
#[cfg(unix)]
#[test]
fn init_never_writes_through_a_link() {
    let p = Project::empty();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("planted");
    let dir = p.path("proj");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&target, dir.join(".gitignore")).unwrap();
    let r = heddle(&p, &["init", "proj"]).code(2);
    assert_eq!(
        r.stderr,
        "error: proj/.gitignore exists; heddle init writes only new files\n"
    );
    assert!(!target.exists(), "nothing written through the link");

    std::fs::remove_file(dir.join(".gitignore")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.join("schemas")).unwrap();
    let r = heddle(&p, &["init", "proj"]).code(2);
    assert_eq!(
        r.stderr,
        "error: proj/schemas is a symbolic link; heddle init does not write through links it did not create\n"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(!dir.join("pipelines").exists(), "nothing written at all");

    std::fs::remove_file(dir.join("schemas")).unwrap();
    heddle(&p, &["init", "proj"]).ok();
    assert!(dir.join("schemas").is_dir() && dir.join(".gitignore").is_file());
}

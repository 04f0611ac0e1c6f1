//! Quoting that cannot be undone: a template inside the command's own quotes (or anywhere
//! else the shell reads its value again) is refused at load, at its file:line:col, before a
//! `--set` or a logbook entry's param can run anything; `logbook verify` shows the params it
//! runs with and refuses ones the entry's pipeline does not accept.

use crate::support::{assert_contains, Project};

/// `$(…)` and backquotes that create a file if the shell ever runs them.
const HOSTILE: &str = "$(touch pwned-a)`touch pwned-b`'; touch pwned-c; '";

fn nothing_ran(p: &Project) {
    for f in ["pwned-a", "pwned-b", "pwned-c"] {
        assert!(!p.path(f).exists(), "{f} was created");
    }
}

/// The double-quoted case in full: where, why, and the two ways to write it.
#[test]
fn a_template_in_double_quotes_is_refused_at_its_position() {
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\n[stages.a]\nrun = \"echo \\\"x={{ params.x }}\\\" > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n",
    );
    let r = p
        .heddle(&["run", "p.toml", "--set", &format!("x={HOSTILE}")])
        .code(2);
    assert_eq!(
        r.stderr.replace(&p.root().display().to_string(), "[PROJECT]"),
        "error: `{{ params.x }}` is inside a double-quoted string: the shell would run a `$(…)` or backquote in its value
  --> p.toml:6:17
  |
6 | run = \"echo \\\"x={{ params.x }}\\\" > {{ out.o }}\"
  |                 ^^^^^^^^^^^^^^
  = help: write it as a word of its own, outside any quotes (heddle quotes every value it puts in a shell command: `echo {{ params.x }}`, `--flag={{ params.x }}`), or use exec form: `run = [\"prog\", \"{{ params.x }}\"]`
"
    );
    nothing_ran(&p);
    p.heddle(&["plan", "p.toml"]).code(2);
}

/// Every context where the shell reads a value again, in a pipeline and in a definition's
/// `stage.toml` (pointed at in that file).
#[test]
fn every_context_that_rereads_a_value_is_refused() {
    let cases = [
        (
            "single",
            "echo '{{ params.x }}' > {{ out.o }}",
            "inside a single-quoted string",
        ),
        (
            "backquote",
            "echo `echo {{ params.x }}` > {{ out.o }}",
            "inside a backquoted command",
        ),
        (
            "heredoc",
            "cat > {{ out.o }} <<EOF\n{{ params.x }}\nEOF",
            "inside a here-document",
        ),
        (
            "comment",
            "echo ok > {{ out.o }} # {{ params.x }}",
            "inside a comment",
        ),
        (
            "param",
            "echo ${X:-{{ params.x }}} > {{ out.o }}",
            "inside a `${…}` expansion",
        ),
        (
            "nested",
            "echo \"$(echo \"{{ params.x }}\")\" > {{ out.o }}",
            "inside a double-quoted string",
        ),
        (
            "backslash",
            "echo \\{{ params.x }} > {{ out.o }}",
            "right after a `\\`",
        ),
    ];
    for (what, run, context) in cases {
        let p = Project::new();
        let text = format!(
            "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\n[stages.a]\nrun = '''\n{run}\n'''\noutputs = {{ o = \"o.txt\" }}\n"
        );
        p.file("p.toml", &text);
        let r = p
            .heddle(&["run", "p.toml", "--set", &format!("x={HOSTILE}")])
            .code(2);
        assert_contains(
            &r.stderr,
            &format!("error: `{{{{ params.x }}}}` is {context}"),
        );
        let line = 7 + run[..run.find("{{ params.x }}").unwrap()]
            .matches('\n')
            .count();
        assert_contains(&r.stderr, &format!("--> p.toml:{line}:"));
        nothing_ran(&p);
        assert!(!p.path("out").exists(), "{what}: nothing ran");
    }

    // In a definition: the error is in its stage.toml.
    let p = Project::new();
    p.file(
        "stages/g/d/stage.toml",
        "[params]\nx = { type = \"string\", default = \"hi\" }\n[outputs]\no = \"o.txt\"\n[stage]\nrun = \"echo \\\"{{ params.x }}\\\" > {{ out.o }}\"\n",
    )
    .file(
        "p.toml",
        "[pipeline]\nname = \"q\"\n[stages.a]\nuses = \"g/d\"\n",
    );
    let r = p.heddle(&["plan", "p.toml"]).code(2);
    assert_contains(&r.stderr, "is inside a double-quoted string");
    assert_contains(&r.stderr, "stages/g/d/stage.toml:6:15");
}

/// A template written as its own word keeps a hostile value inert: the stage sees the text.
#[test]
fn an_unquoted_template_keeps_a_hostile_value_inert() {
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\n[stages.a]\nrun = \"printf '%s\\\\n' {{ params.x }} --x={{ params.x }} \\\"$(printf %s {{ params.x }})\\\" > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n",
    );
    p.heddle(&["run", "p.toml", "--set", &format!("x={HOSTILE}")])
        .ok();
    assert_eq!(
        p.read("out/q/a/o.txt"),
        format!("{HOSTILE}\n--x={HOSTILE}\n{HOSTILE}\n")
    );
    nothing_ran(&p);
}

const REPORTED: &str = "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\nn = 2\n[stages.t]\nreport = true\nrun = \"printf '| k | v |\\\\n|---|---|\\\\n| a | %s |\\\\n' {{ params.n }} > {{ out.t }}; printf %s {{ params.x }} > {{ out.x }}\"\noutputs = { t = \"t.md\", x = \"x.txt\" }\n";

/// `logbook verify` prints every param it runs with (where each comes from), runs a
/// hostile string as text, and refuses an entry param its pipeline does not declare or
/// cannot take, before anything runs.
#[test]
fn verify_shows_its_params_and_refuses_ones_the_pipeline_would_not_take() {
    let p = Project::with_pipeline(REPORTED);
    p.heddle(&["run", "p.toml"]).ok();
    p.heddle(&["logbook", "new", "-o", "e.md"]).ok();
    let entry = p.read("e.md");
    assert_contains(&entry, "params: {\"n\":2,\"x\":\"hi\"}");

    let hostile = serde_json::to_string(&serde_json::json!({"n": 2, "x": HOSTILE})).unwrap();
    p.file("e.md", &entry.replace("{\"n\":2,\"x\":\"hi\"}", &hostile));
    let v = p.heddle(&["logbook", "verify", "e.md"]).ok();
    assert_contains(
        &v.stdout,
        &format!("params  n = 2  (entry)\nparams  x = {HOSTILE}  (entry)\n== verify e.md run 1/1"),
    );
    nothing_ran(&p);
    assert_eq!(p.read("out/q/t/x.txt"), HOSTILE);

    let runs_before = std::fs::read_dir(p.path(".heddle/runs")).unwrap().count();
    for (params, cause) in [
        ("{\"nope\":1}", "the pipeline has no param `nope`"),
        ("{\"n\":\"2; touch pwned-a\"}", "param `n` is an int"),
    ] {
        p.file("e.md", &entry.replace("{\"n\":2,\"x\":\"hi\"}", params));
        let v = p.heddle(&["logbook", "verify", "e.md"]).code(2);
        assert_contains(
            &v.stderr,
            "error: cannot verify e.md: its params are not ones its pipeline p.toml accepts\n  caused by: --set ",
        );
        assert_contains(&v.stderr, cause);
        assert_eq!(v.stdout, "", "nothing printed as if it ran");
        nothing_ran(&p);
    }
    let runs_after = std::fs::read_dir(p.path(".heddle/runs")).unwrap().count();
    assert_eq!(runs_before, runs_after, "nothing ran");
}

/// Exec form passes values raw, so a template inside the script of `sh -c` (or `bash -ec`, a
/// shell by its path) is code to the shell: refused, with the argument form as the fix, which
/// keeps the value inert.
#[test]
fn a_template_in_an_exec_form_shell_script_is_refused() {
    for run in [
        "[\"sh\", \"-c\", \"echo {{ params.x }} > $0\", \"{{ out.o }}\"]",
        "[\"/bin/bash\", \"-ec\", \"echo '{{ params.x }}' > $0\", \"{{ out.o }}\"]",
    ] {
        let p = Project::with_pipeline(&format!(
            "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\n[stages.a]\nrun = {run}\noutputs = {{ o = \"o.txt\" }}\n"
        ));
        let r = p
            .heddle(&["run", "p.toml", "--set", &format!("x={HOSTILE}")])
            .code(2);
        assert_contains(&r.stderr, "-c` runs: exec form passes it raw, and the shell would run what it holds\n  --> p.toml:6:");
        assert_contains(
            &r.stderr,
            "= help: pass it as an argument after the script and read it there as \"$1\"",
        );
        nothing_ran(&p);
    }
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"q\"\n[params]\nx = \"hi\"\n[stages.a]\nrun = [\"sh\", \"-c\", \"printf %s \\\"$1\\\" > \\\"$0\\\"\", \"{{ out.o }}\", \"{{ params.x }}\"]\noutputs = { o = \"o.txt\" }\n",
    );
    p.heddle(&["run", "p.toml", "--set", &format!("x={HOSTILE}")])
        .ok();
    assert_eq!(p.read("out/q/a/o.txt"), HOSTILE);
    nothing_ran(&p);
}

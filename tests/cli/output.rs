//! The exact text users read, through the built binary: each class of invalid pipeline
//! (file:line:col, the source line, the label, the help) and `heddle plan` before and after a
//! change (`heddle dag` is in [`super::pipelines`]). Snapshots are in `tests/cli/snapshots/`,
//! temp paths written as `[PROJECT]`; `INSTA_UPDATE=always cargo test --release --test suite
//! cli::output::` rewrites them after an intended change (review the diff).

use insta::assert_snapshot;

use super::caching::uses_project;
use crate::support::assert_lacks;
use crate::support::snapshot::normalise;
use crate::support::Project;

/// `heddle plan` of `p`'s `pipeline` must fail as a user error (exit 2, no panic); its stderr.
fn diagnostic(p: &Project, pipeline: &str, extra: &[&str]) -> String {
    let mut args = vec!["plan", pipeline];
    args.extend_from_slice(extra);
    let r = p.heddle(&args).code(2);
    assert_lacks(&r.stderr, "panicked");
    normalise(p, &r.stderr)
}

/// Each class of invalid pipeline exits 2 and points at the file, line and column.
#[test]
fn invalid_pipelines() {
    let cases: &[(&str, &str)] = &[
        ("syntax", "[pipeline]\nname = \"x\"\n[stages.a\nrun = \"x\"\n"),
        ("unknown_key", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nrnu = 1\n"),
        ("duplicate_stage", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\n[stages.a]\nrun = \"y\"\n"),
        ("unknown_stage", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = \"nope.o\" }\nrun = \"x\"\n"),
        ("unknown_output", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\noutputs = { o = \"o\" }\n[stages.b]\ninputs = { i = \"a.p\" }\nrun = \"x\"\n"),
        ("cycle", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = \"b.o\" }\nrun = \"x\"\noutputs = { o = \"o\" }\n[stages.b]\ninputs = { i = \"a.o\" }\nrun = \"x\"\noutputs = { o = \"o\" }\n"),
        ("missing_file", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = { path = \"no/such.txt\" } }\nrun = \"x\"\n"),
        ("unknown_template_var", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"echo {{ params.nope }}\"\n"),
        ("unknown_matrix_key", "[pipeline]\nname = \"x\"\n[stages.a]\nmatrix = { k = [1] }\nrun = \"echo {{ matrix.j }}\"\n"),
        ("bad_timeout", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\ntimeout = \"soon\"\n"),
        ("unknown_resource", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nresources = { gpu = 1 }\n"),
        ("no_run", "[pipeline]\nname = \"x\"\n[stages.a]\noutputs = { o = \"o\" }\n"),
        ("unknown_uses", "[pipeline]\nname = \"x\"\n[stages.a]\nuses = \"no/such\"\n"),
        ("wrong_type", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nretries = \"two\"\n"),
    ];
    for (what, text) in cases {
        let p = Project::new();
        p.file("bad.toml", text);
        assert_snapshot!(format!("invalid_{what}"), diagnostic(&p, "bad.toml", &[]));
    }
}

/// A `with` value is checked against the definition's param types, templated or literal, and
/// an unknown param is named; both point at the pipeline file.
#[test]
fn ill_typed_with_values() {
    let p = uses_project();
    assert_snapshot!(
        "set_param_of_the_wrong_type",
        diagnostic(&p, "p.toml", &["--set", "n=x"])
    );
    let templated = p.read("p.toml");
    let literal = |with: &str| templated.replace("with = { times = \"{{ params.n }}\" }", with);
    p.file("p.toml", &literal("with = { times = \"many\" }"));
    assert_snapshot!("with_string_for_int", diagnostic(&p, "p.toml", &[]));
    p.file("p.toml", &literal("with = { times = 1.5, loud = true }"));
    assert_snapshot!(
        "with_float_and_unknown_param",
        diagnostic(&p, "p.toml", &[])
    );
}

#[test]
fn usage_errors_exit_2() {
    let p = Project::new();
    p.file("p.toml", PLAN);
    p.heddle(&["run", "p.toml", "--set", "nope=1"]).code(2);
    p.heddle(&["run", "p.toml", "--force", "nope"]).code(2);
    p.heddle(&["run", "missing.toml"]).code(2);
    p.heddle(&["frobnicate"]).code(2);
}

/// Two chains and a param only `b` uses; no temp path in any command, so keys are stable.
const PLAN: &str = include_str!("fixtures/plan.toml");

/// `heddle plan` says what would run and why: everything on a fresh cache, nothing after a
/// run, the cone of a changed input, the users of a changed param.
#[test]
fn plan_text() {
    let p = Project::new();
    p.file("p.toml", PLAN).file("data/a.txt", "abc\n");
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "p.toml"];
        args.extend_from_slice(extra);
        normalise(&p, &p.heddle(&args).ok().stdout)
    };
    assert_snapshot!("plan_fresh", plan(&[]));
    p.run("p.toml", &[]).ok();
    assert_snapshot!("plan_all_cached", plan(&[]));
    p.file("data/a.txt", "abd\n");
    assert_snapshot!("plan_input_changed", plan(&[]));
    p.file("data/a.txt", "abc\n");
    assert_snapshot!("plan_param_changed", plan(&["--set", "greeting=hi"]));
}

/// `heddle stages show` of a project definition, exactly: a string param's `choices` are
/// printed with it (they were left out, so a user learnt them only from an error).
#[test]
fn stages_show_prints_a_params_choices() {
    let p = Project::new();
    p.file(
        "stages/demo/pick/stage.toml",
        "[stage]\ndescription = \"Picks one.\"\nrun = \"echo {{ params.mode }} > {{ out.o }}\"\n[params]\nmode = { type = \"string\", default = \"a\", choices = [\"a\", \"b\"], description = \"which\" }\nn = { type = \"int\" }\n[outputs]\no = \"o.txt\"\n",
    );
    let out = p.heddle(&["stages", "show", "demo/pick"]).ok().stdout;
    assert_eq!(
        out,
        "demo/pick\n  Picks one.\nparams:\n  mode: string = a (one of a, b)  which\n  n: int (required)\ninputs:\noutputs:\n  o: o.txt\n"
    );
}

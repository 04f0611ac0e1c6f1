//! Pipelines that exercise the model: a 3×2 matrix joined, selected and gathered (and its
//! `heddle dag`), paths with spaces.

use insta::assert_snapshot;

use crate::support::snapshot::normalise;
use crate::support::Project;

#[test]
fn matrix_3x2_joins_and_gathers() {
    let p = Project::with_logged_pipeline(include_str!("fixtures/matrix_3x2.toml"));
    // `heddle dag`: every instance and its edges, exactly (tests/cli/snapshots/).
    let dag = p.heddle(&["dag", "p.toml"]).ok().stdout;
    assert_snapshot!("dag_matrix_3x2", normalise(&p, &dag));
    p.run("p.toml", &[]).ok();
    let ran = p.ran();
    assert_eq!(
        ran.iter().filter(|l| l.starts_with("mul[")).count(),
        6,
        "{ran:?}"
    );
    assert!(ran.contains(&"mul[j=x,k=3]".to_string()), "{ran:?}");
    // pick maps over k (the selector fixed j=y; one=k=2 fixed both) → 3 instances.
    assert_eq!(
        ran.iter().filter(|l| l.starts_with("pick[")).count(),
        3,
        "{ran:?}"
    );
    assert_eq!(p.read("out/m/pick[k=1]/p.txt"), "k2-y-2\nk1-y-1\n");
    assert_eq!(
        p.read("out/m/all/t.txt"),
        "k1-x-1\nk1-y-1\nk2-x-2\nk2-y-2\nk3-x-3\nk3-y-3\n"
    );
    assert_eq!(
        p.read("out/m/all/dirs.txt"),
        "j=x,k=1\nj=x,k=2\nj=x,k=3\nj=y,k=1\nj=y,k=2\nj=y,k=3\n"
    );
}

#[test]
fn paths_with_spaces_are_quoted() {
    let p = Project::new();
    p.file("my data/in put.txt", "spaced\n")
        .file("p.toml", include_str!("fixtures/spaces.toml"));
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/s/a/o u t.txt"), "spaced\n");
    assert_eq!(p.read("out/s/b/copy.txt"), "spaced\n");
}

/// `{{ host.python }}` in a param's default — a definition's and a pipeline's — renders to this
/// platform's Python (`python3` here, `python` on Windows), so a device-host stage runs on either
/// without a `with`; an unknown `host.*` is a load error naming the param.
#[test]
fn host_python_in_param_defaults_is_this_platforms_interpreter() {
    let p = Project::new();
    p.file(
        "stages/t/py/stage.toml",
        "[stage]\nrun = [\"{{ params.python }}\", \"-c\", \"import sys; open(sys.argv[1], 'w').write(sys.argv[2])\", \"{{ out.x }}\", \"{{ params.python }}\"]\n\n[outputs]\nx = \"x.txt\"\n\n[params]\npython = { type = \"string\", default = \"{{ host.python }}\" }\n",
    )
    .file(
        "p.toml",
        "[pipeline]\nname = \"h\"\n\n[params]\ninterp = \"{{ host.python }}\"\n\n[stages.def]\nuses = \"t/py\"\n\n[stages.pipe]\nuses = \"t/py\"\nwith = { python = \"{{ params.interp }}\" }\n",
    );
    p.run("p.toml", &[]).ok();
    let want = if cfg!(windows) { "python" } else { "python3" };
    assert_eq!(p.read("out/h/def/x.txt"), want);
    assert_eq!(p.read("out/h/pipe/x.txt"), want);

    p.file(
        "q.toml",
        "[pipeline]\nname = \"q\"\n\n[params]\ninterp = \"{{ host.pyth }}\"\n\n[stages.a]\nrun = \"echo {{ params.interp }}\"\n",
    );
    let bad = p.heddle(&["plan", "q.toml"]).code(2);
    assert!(
        bad.stderr
            .contains("param `interp`: unknown variable `host.pyth`"),
        "{}",
        bad.stderr
    );
}

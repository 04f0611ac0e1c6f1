//! The JSON Schemas editors read for pipeline files and `stage.toml` (`schemas/*.schema.json`):
//! the committed files are what `heddle schema` prints now, every TOML file in the repository
//! names its schema on its first line, and an independent validator (check-jsonschema, from
//! PyPI) accepts every one of them and rejects a misspelt key as heddle does.
//!
//! Regenerate the committed schemas after changing `runner/src/spec.rs`:
//! `HEDDLE_BLESS=1 cargo test --release --test suite schema::` (or `heddle schema pipeline|stage`).
//! The validator tests skip when check-jsonschema is not installed, and fail instead under
//! HEDDLE_REQUIRE_SCHEMA_CHECK=1 (tests/all.sh installs it and sets that).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::assert_contains;
use support::{bin, found_or_skip, repo_root, Run};

const KINDS: [(&str, &str); 2] = [
    ("pipeline", "pipeline.schema.json"),
    ("stage", "stage.schema.json"),
];

fn heddle_schema(arg: &str) -> String {
    let out: Run = Command::new(bin())
        .args(["schema", arg])
        .output()
        .unwrap()
        .into();
    out.ok().stdout
}

#[test]
fn committed_schemas_are_what_heddle_prints() {
    let bless = std::env::var("HEDDLE_BLESS").as_deref() == Ok("1");
    for (arg, file) in KINDS {
        let now = heddle_schema(arg);
        let path = repo_root().join("schemas").join(file);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &now).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == now,
            "schemas/{file} is stale (runner/src/spec.rs changed): regenerate it with \
             HEDDLE_BLESS=1 cargo test --release --test suite schema::"
        );
    }
}

/// Every pipeline file and stage definition in the repository, with the schema it must name.
fn repo_tomls() -> Vec<(PathBuf, &'static str)> {
    let root = repo_root();
    let mut out = Vec::new();
    for e in std::fs::read_dir(root.join("pipelines")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "toml") {
            out.push((e.path(), "pipeline.schema.json"));
        }
    }
    let mut stack = vec![root.join("stages")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.file_name() == "stage.toml" {
                out.push((e.path(), "stage.schema.json"));
            }
        }
    }
    out.sort();
    assert!(out.len() > 10, "{out:?}");
    out
}

#[test]
fn every_repo_file_names_its_schema_on_its_first_line() {
    for (path, file) in repo_tomls() {
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap_or("");
        let target = first
            .strip_prefix("#:schema ")
            .unwrap_or_else(|| panic!("{}: first line is not `#:schema PATH`", path.display()));
        let resolved = path.parent().unwrap().join(target);
        assert!(
            target.ends_with(file) && resolved.is_file(),
            "{}: `{first}` must name schemas/{file}",
            path.display()
        );
    }
}

#[test]
fn init_writes_the_schemas_its_pipeline_names() {
    let dir = tempfile::tempdir().unwrap();
    let out: Run = Command::new(bin())
        .current_dir(dir.path())
        .args(["init", "--example", "mezo-ort"])
        .output()
        .unwrap()
        .into();
    out.ok();
    let pipeline = dir.path().join("pipelines/mezo-ort.toml");
    let text = std::fs::read_to_string(&pipeline).unwrap();
    let target = text
        .lines()
        .next()
        .unwrap()
        .strip_prefix("#:schema ")
        .unwrap();
    let written = std::fs::read_to_string(pipeline.parent().unwrap().join(target)).unwrap();
    assert_eq!(written, heddle_schema("pipeline"));
    let stage = std::fs::read_to_string(dir.path().join("schemas/stage.schema.json")).unwrap();
    assert_eq!(stage, heddle_schema("stage"));
}

/// check-jsonschema: `$HEDDLE_CHECK_JSONSCHEMA`, else the test venv's, else the one on PATH.
fn validator(what: &str) -> Option<PathBuf> {
    let venv = repo_root().join("target/pytest-venv/bin/check-jsonschema");
    let found = std::env::var_os("HEDDLE_CHECK_JSONSCHEMA")
        .map(PathBuf::from)
        .or_else(|| venv.is_file().then_some(venv))
        .or_else(|| {
            Command::new("check-jsonschema")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| PathBuf::from("check-jsonschema"))
        });
    found_or_skip(
        found,
        "HEDDLE_REQUIRE_SCHEMA_CHECK",
        what,
        "check-jsonschema is not installed (bash tests/all.sh installs it)",
    )
}

fn validate(tool: &Path, schema: &str, files: &[PathBuf]) -> Run {
    Command::new(tool)
        .arg("--schemafile")
        .arg(repo_root().join("schemas").join(schema))
        .args(files)
        .output()
        .unwrap()
        .into()
}

#[test]
fn check_jsonschema_accepts_every_repo_file() {
    let Some(tool) = validator("check_jsonschema_accepts_every_repo_file") else {
        return;
    };
    for (_, schema) in KINDS {
        let files: Vec<PathBuf> = repo_tomls()
            .into_iter()
            .filter(|(_, s)| *s == schema)
            .map(|(p, _)| p)
            .collect();
        let r = validate(&tool, schema, &files);
        assert_eq!(r.code, 0, "{schema}:\n{}", r.all());
        assert!(r.stdout.contains("ok -- validation done"), "{}", r.all());
    }
}

/// A file in a temp folder, validated with check-jsonschema against `schema`.
fn check_one(tool: &Path, schema: &str, name: &str, text: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    validate(tool, schema, &[p])
}

#[test]
fn check_jsonschema_rejects_what_heddle_rejects() {
    let Some(tool) = validator("check_jsonschema_rejects_what_heddle_rejects") else {
        return;
    };
    // A misspelt key in a definition's [stage]: rejected by the schema and by heddle alike.
    let bad_stage = "[stage]\nrun = \"true\"\ntimout = \"1m\"\n";
    let r = check_one(&tool, "stage.schema.json", "stage.toml", bad_stage);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.all().contains("'timout' was unexpected"), "{}", r.all());
    let p = support::Project::new();
    p.file("stages/demo/bad/stage.toml", bad_stage);
    let h = p.heddle(&["stages", "show", "demo/bad"]).code(2);
    assert_contains(&h.stderr, "unknown field `timout`");
    let fixed = bad_stage.replace("timout", "timeout");
    let r = check_one(&tool, "stage.schema.json", "stage.toml", &fixed);
    assert_eq!(r.code, 0, "{}", r.all());

    // The keys each place forbids: `run` in [defaults], `include` in a pipeline stage,
    // `matrix` in a definition's [stage], a stage with neither `run` nor `uses`.
    let head = "[pipeline]\nname = \"p\"\n";
    for (why, schema, text) in [
        (
            "run in [defaults]",
            "pipeline.schema.json",
            format!("{head}[defaults]\nrun = \"x\"\n[stages.a]\nrun = \"x\"\n"),
        ),
        (
            "include in a pipeline stage",
            "pipeline.schema.json",
            format!("{head}[stages.a]\nrun = \"x\"\ninclude = [\"h.py\"]\n"),
        ),
        (
            "no run, no uses",
            "pipeline.schema.json",
            format!("{head}[stages.a]\ntimeout = \"1m\"\n"),
        ),
        (
            "a network heddle does not know",
            "pipeline.schema.json",
            format!("{head}[stages.a]\nrun = \"x\"\nimage = \"i\"\nnetwork = \"bridged\"\n"),
        ),
        (
            "matrix in a definition",
            "stage.schema.json",
            "[stage]\nrun = \"x\"\nmatrix = { k = [1] }\n".to_string(),
        ),
    ] {
        let r = check_one(&tool, schema, "f.toml", &text);
        assert_eq!(r.code, 1, "{why}: expected a rejection\n{}", r.all());
    }
}

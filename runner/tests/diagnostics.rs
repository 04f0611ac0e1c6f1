//! Diagnostics exactly as a user reads them: a pipeline's text (and the definitions it uses)
//! in, the rendered errors out, compared with the snapshots in `snapshots/`. Each case is a
//! folder in `fixtures/diagnostics/` (its `p.toml`, and the `stages/` it uses), named as its
//! snapshot; a new case is a new folder. The CLI prints
//! these same texts; `tests/cli/output.rs` checks that it exits 2 with them.
//!
//! Update a snapshot after an intended change with `INSTA_UPDATE=always cargo test -p
//! heddle-runner --test diagnostics` and review the diff.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use heddle_runner::model::{load_str, LoadError, LoadOptions};

/// Every case folder renders exactly its snapshot.
#[test]
fn each_case_renders_its_snapshot() {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/diagnostics");
    let mut names: Vec<String> = fs::read_dir(&cases)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no cases in {}", cases.display());
    for name in names {
        insta::assert_snapshot!(name.as_str(), errors(&cases.join(&name)));
    }
}

/// The diagnostics of loading the case's `p.toml` (as `pipelines/p.toml`, its `stages/` copied
/// into a temporary root), else of planning it, with the temporary root as `[ROOT]`.
fn errors(case: &Path) -> String {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&case.join("stages"), &root.path().join("stages"));
    let pipeline = fs::read_to_string(case.join("p.toml")).unwrap();
    let opts = LoadOptions {
        root: Some(root.path().to_path_buf()),
        stage_lib: Some(root.path().join(".heddle/stage-lib")),
        ..LoadOptions::default()
    };
    let file = Path::new("pipelines/p.toml");
    let text = match load_str(file, pipeline.clone(), &opts) {
        Err(LoadError::Invalid(d)) => d.to_string(),
        Err(e) => e.to_string(),
        Ok(p) => match heddle_runner::plan::build(Arc::new(p)) {
            Err(d) => d.to_string(),
            Ok(_) => panic!("the pipeline of {} is valid:\n{pipeline}", case.display()),
        },
    };
    text.replace(&*root.path().to_string_lossy(), "[ROOT]")
}

/// Copies the folder `from` (if there is one) to `to`.
fn copy_tree(from: &Path, to: &Path) {
    let Ok(entries) = fs::read_dir(from) else {
        return;
    };
    fs::create_dir_all(to).unwrap();
    for e in entries.map(Result::unwrap) {
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

const HEAD: &str = "[pipeline]\nname = \"p\"\n";

#[test]
fn a_misspelt_set_suggests_the_param() {
    let opts = LoadOptions {
        overrides: vec![("greting".into(), "hi".into())],
        root: Some(std::env::temp_dir()),
        ..LoadOptions::default()
    };
    let text = format!("{HEAD}[params]\ngreeting = \"hello\"\n[stages.a]\nrun = \"x\"\n");
    let err = load_str(Path::new("p.toml"), text, &opts).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

//! A stage definition (`stages/<name>/stage.toml`): parsed, then validated by loading a
//! pipeline that uses it. None may panic.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use heddle_runner::diag::Source;
use heddle_runner::model::{load_str, LoadOptions};
use heddle_runner::spec::{parse, StageDefSpec};
use libfuzzer_sys::fuzz_target;

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        std::fs::create_dir_all(dir.join("stages").join("fz")).expect("stage folder");
        dir
    })
}

/// The pipeline every definition is loaded through: a matrix stage and a stage reading all of
/// it, both `uses = "fz"`. A corpus file, so the `pipeline` target starts from it too.
const PIPELINE: &str = include_str!("../corpus/pipeline/uses_fz.toml");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let root = root();
    let file = root.join("stages").join("fz").join("stage.toml");
    let _ = parse::<StageDefSpec>(&Source::new(&file, text));
    std::fs::write(&file, text).expect("write stage.toml");
    let opts = LoadOptions {
        overrides: Vec::new(),
        root: Some(root.clone()),
        stage_lib: None,
    };
    if let Ok(p) = load_str(&root.join("p.toml"), PIPELINE.to_string(), &opts) {
        let _ = heddle_runner::plan::build(Arc::new(p));
    }
});

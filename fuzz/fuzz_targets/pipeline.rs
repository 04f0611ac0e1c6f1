//! A pipeline file: parsed, validated and planned (matrix expansion and joins included). Any
//! input may be rejected with diagnostics; none may panic.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use heddle_runner::model::{load_str, LoadOptions};
use libfuzzer_sys::fuzz_target;

/// A project with one stage definition (`uses = "fz"`), made once per process.
fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        let def = dir.join("stages").join("fz");
        std::fs::create_dir_all(&def).expect("stage folder");
        std::fs::write(
            def.join("stage.toml"),
            include_str!("../corpus/stage_def/optimize.toml"),
        )
        .expect("stage.toml");
        std::fs::write(dir.join("src.txt"), "hi\n").expect("src.txt");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let root = root();
    let opts = LoadOptions {
        overrides: Vec::new(),
        root: Some(root.clone()),
        stage_lib: None,
    };
    if let Ok(p) = load_str(&root.join("p.toml"), text.to_string(), &opts) {
        // Matrices multiply: keep a planned pipeline small enough to expand quickly.
        let size: usize = p
            .stages
            .iter()
            .map(|s| s.matrix.iter().map(|(_, v)| v.len().max(1)).product::<usize>())
            .sum();
        if size <= 10_000 {
            let _ = heddle_runner::plan::build(Arc::new(p));
        }
    }
});

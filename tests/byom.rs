//! Bring your own model, end to end through the built binary: `heddle init` in an empty folder,
//! a real ONNX model nobody here wrote (the text-direction classifier that the PyPI package
//! rapidocr-onnxruntime ships in its wheel, PaddlePaddle-exported, symbolic dims, weights as
//! Constant nodes) and real images (the samples scikit-image ships in its wheel), then
//! `heddle run` on the scaffolded pipeline: import → images → ORT quantisation × 3 → compile →
//! eval. Nothing is copied from this repository: the stages come from the library in the binary.
//!
//! tests/all.sh installs both packages (--no-deps: only their files are used) into its venv and
//! sets HEDDLE_BYOM_SITE to its site-packages; without it the test says it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

fn site() -> Option<PathBuf> {
    if let Some(s) = std::env::var_os("HEDDLE_BYOM_SITE") {
        return Some(PathBuf::from(s));
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pytest-venv/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.join("rapidocr_onnxruntime").is_dir())
}

#[test]
fn foreign_model_from_an_empty_folder() {
    let Some(site) = site() else {
        assert!(
            std::env::var_os("HEDDLE_REQUIRE_BYOM").is_none(),
            "HEDDLE_REQUIRE_BYOM is set but rapidocr-onnxruntime / scikit-image are not installed"
        );
        eprintln!("skipped: rapidocr-onnxruntime and scikit-image not installed (bash tests/all.sh installs them)");
        return;
    };
    let model = site.join("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    let images = site.join("skimage/data");
    assert!(model.is_file(), "{}", model.display());
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_heddle");
    let cache = dir.path().join("cache");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .current_dir(dir.path().join("project"))
            .env("HEDDLE_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "heddle {args:?} failed:\n{text}");
        text
    };
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    assert_eq!(
        run(&["init", "--example", "compile-onnx"]),
        "created .heddle/, .gitignore and pipelines/compile-onnx.toml\nnext: heddle run pipelines/compile-onnx.toml\n"
    );
    assert!(!project.join("stages").exists());
    // The user's own files: their model and a folder of their images (12 of the shipped samples:
    // colour, greyscale and RGBA, PNG and JPEG).
    std::fs::copy(&model, project.join("model.onnx")).unwrap();
    std::fs::create_dir(project.join("images")).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png") || n.ends_with(".jpg"))
        .collect();
    names.sort();
    assert!(names.len() >= 12, "{names:?}");
    for n in names.iter().take(12) {
        std::fs::copy(images.join(n), project.join("images").join(n)).unwrap();
    }
    // Its input is x[?, 3, ?, ?]: the model's own input size (48x192, rapidocr's config) fixes it.
    run(&[
        "run",
        "pipelines/compile-onnx.toml",
        "--set",
        "shape=[1,3,48,192]",
    ]);
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("out/compile-onnx/import/meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["input_shape_nchw"], serde_json::json!([1, 3, 48, 192]));
    assert_eq!(meta["output_shape_nchw"], serde_json::json!([1, 2]));
    assert!(meta["constants_to_initializers"].as_u64().unwrap() > 0);
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("out/compile-onnx/eval/eval.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["heldout"], 4);
    let rows = summary["rows"].as_array().unwrap();
    let ok: Vec<_> = rows.iter().filter(|r| r["status"] == "ok").collect();
    // a8_w8 and a16_w16 quantise on every onnxruntime this pins; a16_w4 may fail per op, and
    // then it is a row with its error, not a missing row.
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(ok.len() >= 4, "{rows:?}");
    for r in &ok {
        let cos = r["cosine"].as_f64().unwrap();
        let mad = r["mean_abs_diff"].as_f64().unwrap();
        let top1 = r["top1_agreement"].as_f64().unwrap();
        // Real numbers: quantisation moved the outputs (not a copy of the float model).
        assert!(mad > 0.0 && mad.is_finite(), "{r}");
        assert!((-1.0..1.0).contains(&cos), "{r}");
        assert!((0.0..=1.0).contains(&top1), "{r}");
    }
    // 16-bit activations and weights stay close to float on this model (measured on these 4
    // held-out images: cosine 0.9995, top-1 4/4; a8_w8 0.9982, 4/4; a16_w4 0.66, 1/4).

    let w16 = ok
        .iter()
        .find(|r| r["precision"] == "a16_w16" && r["context"] == "ORT_QDQ")
        .expect("a16_w16 ORT_QDQ row");
    assert!(w16["cosine"].as_f64().unwrap() > 0.99, "{w16}");
    assert_eq!(w16["top1_agreement"], 1.0, "{w16}");
    let table = std::fs::read_to_string(project.join("out/compile-onnx/eval/eval.md")).unwrap();
    eprintln!("{table}");
    assert!(
        table.contains("| precision | context | top-1 agree |"),
        "{table}"
    );
    assert!(table.contains("| a8_w8 | ORT_QDQ |"), "{table}");
    // A rerun is all cache hits.
    let again = run(&[
        "run",
        "pipelines/compile-onnx.toml",
        "--set",
        "shape=[1,3,48,192]",
    ]);
    assert!(again.contains("0 ran"), "{again}");
}

fn heddle_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_heddle"))
        .args(args)
        .current_dir(dir)
        .env("HEDDLE_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stages_show_prints_typed_params_inputs_outputs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".heddle")).unwrap();
    let (code, out, _) = heddle_in(dir.path(), &["stages", "show", "eval/compare"]);
    assert_eq!(code, 0);
    let body = out.split_once("includes:").unwrap().1;
    assert_eq!(
        body,
        " ../../lib/heddle_stage.py
params:
  title: string = Float vs quantised contexts on held-out images
inputs:
  compiled (optional)  optional gather of compiled models, e.g. compile[*].model
  float  the float ONNX model (onnx/import or onnx/author)
  heldout  held-out images, float32 NHWC .npy (calib/images)
  meta  its meta.json (input/output names, NCHW shape)
  quant  gather of the quantised models, e.g. optimize[*].model
outputs:
  plots: eval.plots.json
  summary: eval.json
  table: eval.md
"
    );
    let (code, out, _) = heddle_in(dir.path(), &["stages", "show", "onnx/import"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("  batch: int = 1  size of a symbolic first (batch) axis not named in dims\n"),
        "{out}"
    );
    assert!(out.contains("  dims: table = {}  "), "{out}");
    let (code, _, err) = heddle_in(dir.path(), &["stages", "show", "no/such"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "error: no stage definition `no/such` (see `heddle stages list`)\n"
        )
    );
}

#[test]
fn stages_list_project_first_then_library() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".heddle")).unwrap();
    let own = dir.path().join("stages/onnx/import");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("stage.toml"),
        "[stage]\ndescription = \"My own importer. More.\"\nrun = \"true\"\n",
    )
    .unwrap();
    let (code, out, err) = heddle_in(dir.path(), &["stages", "list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "onnx/import    project  My own importer");
    assert!(lines.contains(&"ort/compile    library  The ORT analogue of compiling to a HEF: the quantised model after onnxruntime graph optimisation (OR…"), "{out}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("onnx/import "))
            .count(),
        1
    );
}

#[test]
fn init_refuses_to_overwrite_and_names_examples() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = heddle_in(dir.path(), &["init", "--example", "nope"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "error: no example `nope` (examples: compile-onnx, mezo-ort)\n"
        )
    );
    assert_eq!(heddle_in(dir.path(), &["init"]).0, 0);
    let (code, _, err) = heddle_in(dir.path(), &["init"]);
    assert_eq!(code, 2);
    assert!(
        err.ends_with("exists; heddle init writes only new files\n"),
        "{err}"
    );
}

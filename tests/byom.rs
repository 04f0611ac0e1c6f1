//! Bring your own model, end to end through the built binary: `heddle init` in an empty folder,
//! a real ONNX model nobody here wrote (the text-direction classifier that the PyPI package
//! rapidocr-onnxruntime ships in its wheel, PaddlePaddle-exported, symbolic dims, weights as
//! Constant nodes) and real images (the samples scikit-image ships in its wheel), then
//! `heddle run` on the scaffolded pipeline: import → images → ORT quantisation × 3 → compile →
//! eval. Nothing is copied from this repository: the stages come from the library in the binary.
//! The DFC backend (`pipelines/compile-onnx-dfc.toml`, the one repository file that test copies)
//! runs the same model through the TEST DOUBLE of the DFC in Docker, with a user model script.
//!
//! tests/all.sh installs both packages (--no-deps: only their files are used) into its venv and
//! sets HEDDLE_BYOM_SITE to its site-packages; without it the test says it skipped.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::assert_contains;
use support::Project;

const DOUBLE_IMAGE: &str = "heddle-test/dfc-double:latest";

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

/// The installed packages' site-packages, or None after saying why (a failure under
/// HEDDLE_REQUIRE_BYOM).
fn site_or_skip() -> Option<PathBuf> {
    let found = site();
    if found.is_none() {
        assert!(
            std::env::var_os("HEDDLE_REQUIRE_BYOM").is_none(),
            "HEDDLE_REQUIRE_BYOM is set but rapidocr-onnxruntime / scikit-image are not installed"
        );
        eprintln!("skipped: rapidocr-onnxruntime and scikit-image not installed (bash tests/all.sh installs them)");
    }
    found
}

/// The user's own files in `project`: their model at model.onnx and a folder images/ of 12 of
/// the shipped samples (colour, greyscale and RGBA, PNG and JPEG).
fn user_files(site: &Path, project: &Path) {
    let model = site.join("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    let images = site.join("skimage/data");
    assert!(model.is_file(), "{}", model.display());
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
}

/// An empty project folder with a cache dir beside it (not inside: the test lists the
/// project's files), both in the returned temp dir.
fn empty_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let cache = dir.path().join("cache");
    (dir, project, cache)
}

/// `heddle ARGS` in `project` with the cache beside it; panics with the output on failure.
fn heddle_ok(project: &Path, cache: &Path, args: &[&str]) -> String {
    let out = Command::new(support::bin())
        .args(args)
        .current_dir(project)
        .env("HEDDLE_CACHE_DIR", cache)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "heddle {args:?} failed:\n{text}");
    text
}

fn json_at(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn foreign_model_from_an_empty_folder() {
    let Some(site) = site_or_skip() else {
        return;
    };
    let (dir, project, cache) = empty_project();
    let run = |args: &[&str]| heddle_ok(&project, &cache, args);
    assert_eq!(
        run(&["init", "--example", "compile-onnx"]),
        "created .heddle/, .gitignore, schemas/ and pipelines/compile-onnx.toml\nnext: heddle run pipelines/compile-onnx.toml\n"
    );
    assert!(!project.join("stages").exists());
    user_files(&site, &project);
    // Its input is x[?, 3, ?, ?]: the model's own input size (48x192, rapidocr's config) fixes it.
    run(&[
        "run",
        "pipelines/compile-onnx.toml",
        "--set",
        "shape=[1,3,48,192]",
    ]);
    let meta = json_at(&project.join("out/compile-onnx/import/meta.json"));
    assert_eq!(meta["input_shape_nchw"], serde_json::json!([1, 3, 48, 192]));
    assert_eq!(meta["output_shape_nchw"], serde_json::json!([1, 2]));
    assert!(meta["constants_to_initializers"].as_u64().unwrap() > 0);
    let summary = json_at(&project.join("out/compile-onnx/eval/eval.json"));
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
    assert_contains(&table, "| precision | context | top-1 agree |");
    assert_contains(&table, "| a8_w8 | ORT_QDQ |");
    // A rerun is all cache hits.
    let again = run(&[
        "run",
        "pipelines/compile-onnx.toml",
        "--set",
        "shape=[1,3,48,192]",
    ]);
    assert_contains(&again, "0 ran");
    // Nothing of this repository in the project: the scaffold, the user's files and the outputs.
    let mut top: Vec<_> = std::fs::read_dir(&project)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            ".gitignore",
            ".heddle",
            "images",
            "model.onnx",
            "out",
            "pipelines",
            // the JSON Schemas the pipeline's `#:schema` line names, written by `heddle init`
            "schemas"
        ]
    );
    // the scaffolded pipeline and the lock file the run wrote
    let mut pipes: Vec<_> = std::fs::read_dir(project.join("pipelines"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    pipes.sort();
    assert_eq!(pipes, ["compile-onnx.lock", "compile-onnx.toml"]);
    assert!(!dir
        .path()
        .starts_with(Path::new(env!("CARGO_MANIFEST_DIR"))));
}

/// A new user's first try (issue 24): `heddle init`, one of the onnx package's own small models
/// (IR 3, opset 9: its weights listed among the graph inputs) saved as model.onnx, images in
/// images/, `heddle run` as init says, no file edited and no `--set`: every precision reaches
/// eval.
#[test]
fn an_ir3_model_from_the_onnx_package_runs_with_no_file_edited() {
    let Some(site) = site_or_skip() else {
        return;
    };
    let (_dir, project, cache) = empty_project();
    let run = |args: &[&str]| heddle_ok(&project, &cache, args);
    assert_eq!(
        run(&["init"]),
        "created .heddle/, .gitignore, schemas/ and pipelines/compile-onnx.toml\nnext: heddle run pipelines/compile-onnx.toml\n"
    );
    user_files(&site, &project);
    std::fs::copy(
        site.join("onnx/backend/test/data/light/light_squeezenet.onnx"),
        project.join("model.onnx"),
    )
    .unwrap();
    run(&["run", "pipelines/compile-onnx.toml"]);
    let meta = json_at(&project.join("out/compile-onnx/import/meta.json"));
    assert_eq!(meta["source"]["ir_version"], 3);
    assert_eq!(meta["initializer_inputs_dropped"], 52);
    let summary = json_at(&project.join("out/compile-onnx/eval/eval.json"));
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(rows.iter().all(|r| r["status"] == "ok"), "{rows:?}");
}

/// The DFC backend on the foreign model, against the TEST DOUBLE of the DFC (numbers mean
/// nothing; the chain, the failures reaching the table and the model-script merge are checked).
#[test]
fn foreign_model_through_the_dfc_double_with_a_user_model_script() {
    let Some(site) = site_or_skip() else {
        return;
    };
    if !support::docker::image_ready(
        "foreign_model_through_the_dfc_double_with_a_user_model_script",
        DOUBLE_IMAGE,
        "tests/images/dfc-double/build.sh",
    ) {
        return;
    }
    let (_dir, project, cache) = empty_project();
    let run = |args: &[&str]| heddle_ok(&project, &cache, args);
    run(&["init"]);
    user_files(&site, &project);
    // The pipeline (not an `init` example), with the user's model script bound to optimize.
    let pipeline = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/compile-onnx-dfc.toml"),
    )
    .unwrap();
    let bound = pipeline.replacen(
        r#"inputs = { har = "translate.har", calib = "images.calib" }"#,
        r#"inputs = { har = "translate.har", calib = "images.calib", alls = { path = "model.alls" } }"#,
        1,
    );
    assert_ne!(bound, pipeline, "optimize's inputs line moved");
    std::fs::write(project.join("pipelines/compile-onnx-dfc.toml"), bound).unwrap();
    std::fs::write(
        project.join("model.alls"),
        "# the user's own lines\nmodel_optimization_config(calibration, batch_size=2)\n\
         performance_param(compiler_optimization_level=max)\n",
    )
    .unwrap();
    let args = [
        "run",
        "pipelines/compile-onnx-dfc.toml",
        "--set",
        "shape=[1,3,48,192]",
        "--set",
        "dfc_image=heddle-test/dfc-double:latest",
        "--set",
        "gpus=none",
    ];
    run(&args);
    let out = project.join("out/compile-onnx-dfc");
    let rep = json_at(&out.join("optimize[precision=a16_w16]/optimize.json"));
    assert!(rep["sdk"]["test_double"]
        .as_str()
        .unwrap()
        .starts_with("TEST DOUBLE"));
    assert_eq!(
        rep["model_script"],
        "quantization_param({*}, precision_mode=a16_w16)\n\
         model_optimization_flavor(optimization_level=2, compression_level=0)\n\
         model_optimization_config(calibration, batch_size=2, calibset_size=1024)\n\
         performance_param(compiler_optimization_level=max)\n"
    );
    assert_eq!(
        rep["model_script_overrides"],
        serde_json::json!([{"command": "model_optimization_config", "target": "calibration",
                            "keyword": "batch_size", "stage": "8", "user": "2"}])
    );
    // 8 images calibrate (12 minus 4 held out); the DFC uses at most what it is given.
    assert_eq!(rep["calibration_entries"], 8);
    let hef = std::fs::read(out.join("compile[precision=a16_w16]/model.hef")).unwrap();
    assert!(String::from_utf8_lossy(&hef).contains("TEST DOUBLE"));
    let summary = json_at(&out.join("eval/eval.json"));
    assert_eq!(summary["heldout"], 4);
    let rows: Vec<_> = summary["rows"].as_array().unwrap().iter().collect();
    let row = |p: &str, c: &str| {
        *rows
            .iter()
            .find(|r| r["precision"] == p && r["context"] == c)
            .unwrap_or_else(|| panic!("no row {p} {c}: {rows:?}"))
    };
    assert_eq!(rows.len(), 6, "{rows:?}");
    // The double's known failures reach the table as rows: a16_w4 inside optimize (both
    // contexts skipped), a8_w8 inside SDK_BIT_EXACT inference.
    for c in ["SDK_QUANTIZED", "SDK_BIT_EXACT"] {
        assert_eq!(row("a16_w4", c)["status"], "skipped");
    }
    assert_eq!(
        row("a8_w8", "SDK_BIT_EXACT")["error"],
        "InferenceError: graph execution error at conv2_1/act_op_1/pow"
    );
    for (p, c) in [
        ("a16_w16", "SDK_QUANTIZED"),
        ("a16_w16", "SDK_BIT_EXACT"),
        ("a8_w8", "SDK_QUANTIZED"),
    ] {
        let r = row(p, c);
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["mean_abs_diff"].as_f64().unwrap() > 0.0, "{r}");
    }
    let table = std::fs::read_to_string(out.join("eval/eval.md")).unwrap();
    assert_contains(
        &table,
        "float reference: SDK_NATIVE on the translated HAR (DFC emulator, fp32).",
    );
    // All cached but dfc/identify, the toolchain check that looks at the machine on every run.
    let again = run(&args);
    assert_contains(&again, "1 ran");
}

#[test]
fn stages_show_prints_typed_params_inputs_outputs() {
    let p = Project::new();
    let out = p.heddle(&["stages", "show", "eval/compare"]).ok().stdout;
    let body = out.split_once("includes:").unwrap().1;
    assert_eq!(
        body,
        " ../../lib/heddle_stage.py
params:
  quant_context: string = ORT_QDQ  context name of the `quant` gather's rows (a member's own matrix `context` wins)
  reference_label: string = SDK_NATIVE (DFC emulator, fp32)  what `reference` is, for the table (with `float`: onnxruntime CPU, fp32)
  title: string = Float vs quantised contexts on held-out images
  top1_axis: int = 1  the output axis top-1 agreement takes the argmax over (1 = channels / classes; -1 for a sequence model's [N, T, classes])
inputs:
  compiled (optional)  optional gather of compiled models, e.g. compile[*].model
  float (optional)  the float ONNX model (onnx/import or onnx/author), run here as the reference
  heldout  held-out images, float32 NHWC .npy (calib/images)
  meta  its meta.json (input/output names, NCHW shape)
  quant  gather of the quantised models, e.g. optimize[*].model
  reference (optional)  or: the float reference's outputs, .npy (dfc/infer with SDK_NATIVE)
outputs:
  plots: eval.plots.json
  summary: eval.json
  table: eval.md
"
    );
    let out = p.heddle(&["stages", "show", "onnx/import"]).ok().stdout;
    assert_contains(
        &out,
        "  batch: int = 1  size of a symbolic first (batch) axis not named in dims\n",
    );
    assert_contains(&out, "  dims: table = {}  ");
    let r = p.heddle(&["stages", "show", "no/such"]).code(2);
    assert_eq!(
        r.stderr,
        "error: no stage definition `no/such` (see `heddle stages list`)\n"
    );
}

#[test]
fn stages_list_project_first_then_library() {
    let p = Project::new();
    p.file(
        "stages/onnx/import/stage.toml",
        "[stage]\ndescription = \"My own importer. More.\"\nrun = \"true\"\n",
    );
    let out = p.heddle(&["stages", "list"]).ok().stdout;
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
    let p = Project::empty();
    let r = p.heddle(&["init", "--example", "nope"]).code(2);
    assert_eq!(
        r.stderr,
        "error: no example `nope` (examples: compile-onnx, compile-onnx-dfc, mezo-ort)\n"
    );
    p.heddle(&["init"]).ok();
    let err = p.heddle(&["init"]).code(2).stderr;
    assert!(
        err.ends_with("exists; heddle init writes only new files\n"),
        "{err}"
    );
}

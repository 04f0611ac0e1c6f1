//! The model corpus, through the built binary: every real ONNX model the stage library must
//! take (or refuse at import, in one line) runs `heddle init`'s compile-onnx pipeline, one
//! `heddle run --set model=...` per model: import → images → ORT quantisation × 3 precisions →
//! compile → eval. The rule checked: a model reaches eval, or `onnx/import` refuses it with an
//! ImportModelError and nothing after import fails. Which of the two each model gets is the
//! corpus's own `expect` (tests/corpus/make_corpus.py); the numbers are printed, not asserted
//! (top-1 agreement of a quantised model is what the run measures, not a fixed answer).
//!
//! The corpus (make_corpus.py lays it out, each entry naming its package, version and path):
//! every model in `onnx/backend/test/data/light/` of the pinned onnx, the PP-OCR models of the
//! rapidocr-onnxruntime wheel, nudenet's YOLOv8n, magika's and silero-vad's models (non-image:
//! refused), onnxruntime's own `datasets/`, and a few variants derived from those by onnx's and
//! onnxruntime's own tools (opset 7, float16, NHWC, opset 21, external data), for what no
//! shipped model has. Images: photos scikit-image ships.
//!
//! tests/all.sh installs the packages (--no-deps: only their files are used) into
//! target/pytest-venv and sets HEDDLE_REQUIRE_CORPUS=1; without them the test says it skipped.
//! The table is printed and written to target/corpus.md.

use crate::support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::found_or_skip;
use support::records::{instances, status};

const PACKAGES: &[&str] = &[
    "rapidocr_onnxruntime",
    "nudenet",
    "magika",
    "silero_vad",
    "skimage",
    "onnx",
    "onnxruntime",
];
const PRECISIONS: &[&str] = &["a16_w16", "a8_w8", "a16_w4"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's site-packages holding every corpus package.
fn site() -> Option<PathBuf> {
    let lib = repo().join("target/pytest-venv/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| PACKAGES.iter().all(|pkg| p.join(pkg).is_dir()))
}

/// `heddle ARGS` in `project` with `cache`: (exit code, stdout + stderr).
fn heddle(project: &Path, cache: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(support::bin())
        .args(args)
        .current_dir(project)
        .env("HEDDLE_CACHE_DIR", cache)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn json_at(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// A `--set` value: TOML for lists and numbers, the bare text for strings.
fn set_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One model's row: what happened and, for a model that reached eval, top-1 agreement per
/// precision (the quantised QDQ model / the ORT-compiled one), or the failure; and what was
/// wrong with it against the rule, if anything.
struct Row {
    cells: Vec<String>,
    problem: Option<String>,
}

fn run_model(project: &Path, cache: &Path, e: &Value) -> Row {
    let name = e["name"].as_str().unwrap();
    let expect = e["expect"].as_str().unwrap();
    let mut args = vec![
        "run".to_string(),
        "pipelines/compile-onnx.toml".into(),
        "--set".into(),
        format!("model={}", e["model"].as_str().unwrap()),
        "--set".into(),
        "holdout=2".into(),
    ];
    for (k, v) in e["params"].as_object().unwrap() {
        args.push("--set".into());
        args.push(format!("{k}={}", set_value(v)));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, text) = heddle(project, cache, &argv);
    let (_, shown) = heddle(project, cache, &["show", "last", "--json"]);
    let rec: Value = serde_json::from_str(&shown)
        .unwrap_or_else(|err| panic!("{name}: show last --json: {err}\n{shown}\n{text}"));
    let all = instances(&rec);
    let out = project.join("out/compile-onnx");
    let meta = json_at(&out.join("import/meta.json"));
    let import = &all["import"];
    let source = e["source"].as_str().unwrap_or("").to_string()
        + &e["derived"]
            .as_str()
            .map(|d| format!(" (derived: {d})"))
            .unwrap_or_default();
    let mut cells = vec![name.to_string()];
    let mut problem = None;
    if status(import) == "ok" {
        let m = meta.expect("meta.json of an import that succeeded");
        let src = &m["source"];
        cells.push(format!("{} → {}", src["ir_version"], m["ir_version"]));
        cells.push(format!("{} → {}", src["opset"], m["opset"]));
        cells.push(format!(
            "{} {} {}",
            m["input_name"].as_str().unwrap_or("?"),
            m["input_layout"].as_str().unwrap_or("?"),
            m["input_shape"]
        ));
        let failed: Vec<String> = all
            .iter()
            .filter(|(_, i)| status(i) == "failed")
            .map(|(l, i)| format!("{l}: {}", i["status"]["error"].as_str().unwrap_or("")))
            .collect();
        let eval = json_at(&out.join("eval/eval.json")).filter(|_| status(&all["eval"]) == "ok");
        match eval {
            Some(eval) => {
                cells.push("eval".into());
                let rows = eval["rows"].as_array().cloned().unwrap_or_default();
                for p in PRECISIONS {
                    let cell = |ctx: &str| {
                        rows.iter()
                            .find(|r| r["precision"] == *p && r["context"] == ctx)
                            .map(|r| match r["top1_agreement"].as_f64() {
                                Some(t) => format!("{:.0}%", t * 100.0),
                                None => r["status"].as_str().unwrap_or("?").to_string(),
                            })
                            .unwrap_or_else(|| "-".into())
                    };
                    cells.push(format!("{} / {}", cell("ORT_QDQ"), cell("ORT_COMPILED")));
                }
            }
            None => cells.push(format!("FAILED after import (exit {code})")),
        }
        if !failed.is_empty() {
            problem = Some(format!("failed after import: {}", failed.join("; ")));
        } else if expect != "eval" {
            problem = Some("expected a refusal at import, but it reached eval".into());
        }
    } else {
        let err = import["status"]["error"].as_str().unwrap_or("").to_string();
        let class = import["status"]["error_class"].as_str().unwrap_or("");
        cells.extend(["-".into(), "-".into(), "-".into()]);
        cells.push(format!("refused: {err}"));
        let others_failed: Vec<&String> = all
            .iter()
            .filter(|(l, i)| l.as_str() != "import" && status(i) == "failed")
            .map(|(l, _)| l)
            .collect();
        if class != "ImportModelError" {
            problem = Some(format!(
                "import failed with {class}, not a refusal: {err}\n{text}"
            ));
        } else if expect != "refused" {
            problem = Some(format!("expected to reach eval, refused: {err}"));
        } else if err.lines().count() != 1 || !others_failed.is_empty() || code != 1 {
            problem = Some(format!(
                "a refusal is one line, exit 1, nothing else failed: {err:?}, {others_failed:?}, exit {code}"
            ));
        }
    }
    cells.push(source);
    Row { cells, problem }
}

#[test]
fn every_model_reaches_eval_or_is_refused_at_import() {
    let Some(site) = found_or_skip(
        site(),
        "HEDDLE_REQUIRE_CORPUS",
        "the model corpus (tests/corpus.rs)",
        "target/pytest-venv lacks rapidocr-onnxruntime, nudenet, magika, silero-vad or \
         scikit-image (bash tests/all.sh installs them with --no-deps)",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let corpus_dir = dir.path().join("corpus");
    let cache = dir.path().join("cache");
    let python = site.join("../../../bin/python");
    let made = Command::new(&python)
        .arg(repo().join("tests/corpus/make_corpus.py"))
        .arg(&site)
        .arg(&corpus_dir)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "make_corpus.py: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let corpus = json_at(&corpus_dir.join("corpus.json")).unwrap();
    let models = corpus["models"].as_array().unwrap();
    // Two projects made by `heddle init` share one cache (and so one provisioned env) and take
    // the models in turn: most stages run one python process, so two runs fill the 2 cores CI
    // has. (One project cannot: a second run of a pipeline waits for the first.)
    let projects: Vec<PathBuf> = (0..2)
        .map(|i| {
            let project = dir.path().join(format!("project{i}"));
            std::fs::create_dir(&project).unwrap();
            let (code, text) = heddle(&project, &cache, &["init"]);
            assert_eq!(code, 0, "{text}");
            support::copy_tree(&corpus_dir.join("models"), &project.join("models"));
            support::copy_tree(&corpus_dir.join("images"), &project.join("images"));
            project
        })
        .collect();
    let rows: std::sync::Mutex<Vec<Option<Row>>> =
        std::sync::Mutex::new((0..models.len()).map(|_| None).collect());
    // The first model alone: its run provisions the python env both projects then share.
    rows.lock().unwrap()[0] = Some(run_model(&projects[0], &cache, &models[0]));
    let next = std::sync::atomic::AtomicUsize::new(1);
    std::thread::scope(|s| {
        for project in &projects {
            let (next, rows, cache) = (&next, &rows, &cache);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(e) = models.get(i) else { break };
                let row = run_model(project, cache, e);
                rows.lock().unwrap()[i] = Some(row);
            });
        }
    });
    let mut table = format!(
        "Model corpus through pipelines/compile-onnx.toml (onnxruntime CPU; onnx {}; images: {}).\n\
         top-1: share of held-out images whose argmax agrees with the float model, quantised QDQ / \
         ORT-compiled.\n\n\
         | model | IR | opset | input | result | a16_w16 | a8_w8 | a16_w4 | source |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        corpus["onnx"].as_str().unwrap_or("?"),
        corpus["images"].as_str().unwrap_or("?")
    );
    let mut problems = Vec::new();
    for (e, row) in models.iter().zip(rows.into_inner().unwrap()) {
        let row = row.expect("every model ran");
        let mut cells = row.cells;
        if cells.len() == 6 {
            // refused: no precision columns
            cells.splice(5..5, ["".to_string(), "".into(), "".into()]);
        }
        let _ = writeln!(table, "| {} |", cells.join(" | ").replace('\n', " "));
        if let Some(p) = row.problem {
            problems.push(format!("{}: {p}", e["name"].as_str().unwrap()));
        }
    }
    println!("{table}");
    let _ = std::fs::write(repo().join("target/corpus.md"), &table);
    assert!(
        problems.is_empty(),
        "{} of {} models broke the rule:\n{}\n\n{table}",
        problems.len(),
        models.len(),
        problems.join("\n")
    );
}

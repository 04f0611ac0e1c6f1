//! The three routes to a real DFC (README, "Bring your DFC"), each run end to end through the
//! binary from an empty folder: `heddle init --example compile-onnx-dfc` with the route's flags,
//! the user's model and images, `heddle run`. The DFC is the TEST DOUBLE of `hailo_sdk_client`
//! packaged as a user has the real one (tests/images/dfc-double):
//! - (a) an image named like the AI Software Suite's (`hailo_ai_sw_suite_2025-10:testdouble`,
//!   the double's wheel in /local/workspace/hailo_virtualenv, user `hailo`), built by build.sh;
//! - (b) the double's wheel (make_wheel.py), from which heddle builds its recipe
//!   (stages/dfc/image/Dockerfile) on a local Debian base instead of the CUDA one (no registry);
//! - (c) the same wheel in a python env heddle provisions on the host.
//!
//! Each run is CPU-only (`gpus=none`, `level=0`), as it would be on a machine without a GPU.
//! The model and images are the BYOM test's (a PP-OCR model and scikit-image samples from their
//! PyPI wheels, HEDDLE_BYOM_SITE); without them, or without the images, the tests say they skipped.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::assert_contains;
use support::docker;

const SUITE_IMAGE: &str = "hailo_ai_sw_suite_2025-10:testdouble";
const WHEEL_BASE: &str = "heddle-test/dfc-wheel-base:bookworm";
const BUILD: &str = "tests/images/dfc-double/build.sh";
const PIPE: &str = "pipelines/compile-onnx-dfc.toml";
/// CPU-only, and the model's own input size (48x192, rapidocr's config).
const SETS: &[&str] = &[
    "--set",
    "shape=[1,3,48,192]",
    "--set",
    "gpus=none",
    "--set",
    "level=0",
];

fn site() -> Option<PathBuf> {
    if let Some(s) = std::env::var_os("HEDDLE_BYOM_SITE") {
        return Some(PathBuf::from(s));
    }
    let lib = support::repo_root().join("target/pytest-venv/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.join("rapidocr_onnxruntime").is_dir())
}

/// The user's files: the model at model.onnx and 12 images in images/.
fn user_files(site: &Path, project: &Path) {
    let model = site.join("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    std::fs::copy(&model, project.join("model.onnx")).unwrap();
    std::fs::create_dir(project.join("images")).unwrap();
    let images = site.join("skimage/data");
    let mut names: Vec<_> = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png") || n.ends_with(".jpg"))
        .collect();
    names.sort();
    for n in names.iter().take(12) {
        std::fs::copy(images.join(n), project.join("images").join(n)).unwrap();
    }
}

struct Env {
    _dir: tempfile::TempDir,
    project: PathBuf,
    cache: PathBuf,
}

/// An empty project folder; the cache is shared by this file's tests (the py env is provisioned
/// once) and lives under cargo's temp dir, outside the project.
fn empty_project() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dfc-routes-cache");
    Env {
        _dir: dir,
        project,
        cache,
    }
}

impl Env {
    fn heddle(&self, args: &[&str]) -> Output {
        Command::new(support::bin())
            .args(args)
            .current_dir(&self.project)
            .env("HEDDLE_CACHE_DIR", &self.cache)
            .env_remove("HEDDLE_REMOTE_CACHE")
            .env("XDG_CONFIG_HOME", self.project.join(".no-user-config"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.heddle(args);
        let text = text(&out);
        assert!(out.status.success(), "heddle {args:?} failed:\n{text}");
        text
    }

    fn record(&self) -> Value {
        serde_json::from_str(&self.ok(&["show", "last", "--json"])).unwrap()
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// The double's wheel, built into `dir` by make_wheel.py.
fn double_wheel(dir: &Path) -> PathBuf {
    let out = Command::new("python3")
        .arg(support::repo_root().join("tests/images/dfc-double/make_wheel.py"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn instance<'a>(rec: &'a Value, label: &str) -> &'a Value {
    support::instance(rec, label)
}

/// What every route's run must show: completed; the toolchain facts of the double (version,
/// hw_arch values, no GPU, HailoRT where the DFC runs); the eval table and every other place its
/// numbers reach labelled (double); a second run all cached but the toolchain check.
fn check_run(e: &Env, run: &str) -> Value {
    assert_contains(run, "done compile-onnx-dfc");
    assert_contains(
        run,
        "(double: numbers from a test double, not the vendor's tool)",
    );
    let rec = e.record();
    assert_eq!(rec["status"], "completed", "{run}");
    let facts = &instance(&rec, "identify")["facts"];
    assert_eq!(facts["dfc"]["version"], "0.0.0+testdouble", "{facts}");
    assert!(facts["dfc"]["test_double"]
        .as_str()
        .unwrap()
        .starts_with("TEST DOUBLE"));
    assert!(facts["dfc"]["hw_archs"]
        .as_array()
        .unwrap()
        .contains(&Value::from("hailo10h")));
    assert_eq!(facts["gpu"]["visible"], false, "{facts}");
    for p in ["a16_w16", "a8_w8"] {
        let c = instance(&rec, &format!("compile[precision={p}]"));
        assert_eq!(c["status"]["status"], "ok", "{c}");
    }
    let md = std::fs::read_to_string(e.project.join("out/compile-onnx-dfc/eval/compare.md"))
        .or_else(|_| {
            let dir = e.project.join("out/compile-onnx-dfc/eval");
            let md = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .find(|f| f.path().extension().is_some_and(|x| x == "md"))
                .unwrap()
                .path();
            std::fs::read_to_string(md)
        })
        .unwrap();
    assert_contains(&md, "SDK_QUANTIZED");
    // The HTML report and a logbook entry: every table row says (double).
    e.ok(&["report", "-o", "report.html"]);
    let html = std::fs::read_to_string(e.project.join("report.html")).unwrap();
    assert_contains(&html, "(double)");
    e.ok(&["logbook", "new", "-o", "logbook/entry.md"]);
    let entry = std::fs::read_to_string(e.project.join("logbook/entry.md")).unwrap();
    // The table block's rows: its `|` lines after the header and the separator.
    let rows: Vec<&str> = entry
        .lines()
        .skip_while(|l| !l.starts_with("<!-- heddle:begin table"))
        .take_while(|l| !l.starts_with("<!-- heddle:end"))
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    assert!(!rows.is_empty(), "{entry}");
    for r in rows {
        assert_contains(r, "(double)");
    }
    // Everything that succeeded is cached the second time but the toolchain check, which looks
    // at the machine on every run (the double's two failures run again, as failures do).
    let again = e.ok(&[&["run", PIPE][..], SETS].concat());
    let rec2 = e.record();
    let ran: Vec<&str> = rec2["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i[1]["cached"] == false && i[1]["status"]["status"] == "ok")
        .map(|i| i[0].as_str().unwrap())
        .collect();
    assert_eq!(ran, ["identify"], "{again}");
    rec
}

#[test]
fn no_dfc_configured_names_the_three_routes() {
    let e = empty_project();
    assert_eq!(
        e.ok(&["init", "--example", "compile-onnx-dfc"]),
        "created .heddle/, .heddle/config.toml ([dfc] to fill in: three routes), .gitignore, schemas/ and pipelines/compile-onnx-dfc.toml\n\
         next: put your model at model.onnx and your images in images/, then heddle run pipelines/compile-onnx-dfc.toml\n"
    );
    // The user's files (their content does not matter: nothing runs).
    std::fs::write(e.project.join("model.onnx"), "not yet").unwrap();
    std::fs::create_dir(e.project.join("images")).unwrap();
    let out = e.heddle(&["run", PIPE]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: no Hailo Dataflow Compiler configured for the DFC stages (identify, translate, optimize, compile, native, infer): `dfc_image` is empty\n  \
         bring your DFC one of three ways, in .heddle/config.toml (or ~/.config/heddle/config.toml):\n  \
         (a) the AI Software Suite image you loaded:  [dfc] image = \"hailo_ai_sw_suite_2025-10:1\"  (and python = \"/local/workspace/hailo_virtualenv/bin/python\", user = \"hailo\")\n  \
         (b) the DFC wheel, in an image heddle builds:  [dfc] wheel = \"hailo_dataflow_compiler-<version>-py3-none-linux_x86_64.whl\"\n  \
         (c) the DFC wheel, in a python env on this host:  [dfc] wheel = \"...\" and run_on = \"host\"\n  \
         or once: --set dfc_image=IMAGE. `heddle init --example compile-onnx-dfc --dfc-image|--dfc-wheel ...` writes the config; see README.md, section \"Bring your DFC\"\n"
    );
    // A mistake in [dfc] points at its line.
    std::fs::write(
        e.project.join(".heddle/config.toml"),
        "[dfc]\nimage = \"x:1\"\nrun_on = \"gpu\"\n",
    )
    .unwrap();
    let out = e.heddle(&["plan", PIPE]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: .heddle/config.toml:3:10: [dfc] run_on must be \"container\" or \"host\", not \"gpu\"\n"
            .replace(".heddle", &e.project.join(".heddle").display().to_string())
    );
}

#[test]
fn init_writes_the_config_of_each_route() {
    let e = empty_project();
    e.ok(&[
        "init",
        "--example",
        "compile-onnx-dfc",
        "--dfc-image",
        "hailo_ai_sw_suite_2025-10:1",
        "--dfc-python",
        "/local/workspace/hailo_virtualenv/bin/python",
        "--dfc-user",
        "hailo",
    ]);
    let config = std::fs::read_to_string(e.project.join(".heddle/config.toml")).unwrap();
    assert!(config.ends_with(
        "[dfc]\nimage = \"hailo_ai_sw_suite_2025-10:1\"\npython = \"/local/workspace/hailo_virtualenv/bin/python\"\nuser = \"hailo\"\n"
    ), "{config}");
    let e2 = empty_project();
    let wheel = double_wheel(&e2.project);
    let w = wheel.display().to_string();
    let out = e2.ok(&[
        "init",
        "--example",
        "compile-onnx-dfc",
        "--dfc-wheel",
        &w,
        "--dfc-on-host",
    ]);
    assert_contains(&out, "(route c: the wheel in a host python env)");
    let config = std::fs::read_to_string(e2.project.join(".heddle/config.toml")).unwrap();
    assert!(
        config.ends_with(&format!("[dfc]\nwheel = \"{w}\"\nrun_on = \"host\"\n")),
        "{config}"
    );
    // A DFC flag on an example without a DFC is refused.
    let e3 = empty_project();
    let out = e3.heddle(&["init", "--dfc-image", "x:1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn route_a_the_suite_image() {
    let test = "route_a_the_suite_image";
    let Some(site) = site() else {
        return docker::skip(test, "rapidocr-onnxruntime / scikit-image not installed");
    };
    if !docker::image_ready(test, SUITE_IMAGE, BUILD) {
        return;
    }
    let e = empty_project();
    e.ok(&[
        "init",
        "--example",
        "compile-onnx-dfc",
        "--dfc-image",
        SUITE_IMAGE,
        "--dfc-python",
        "/local/workspace/hailo_virtualenv/bin/python",
        "--dfc-user",
        "hailo",
    ]);
    user_files(&site, &e.project);
    // Only up to a stage first: the toolchain check and what translate needs.
    let run = e.ok(&[&["run", PIPE, "translate"][..], SETS].concat());
    assert_contains(
        &run,
        "left as it was (this run ran only translate and what it needs)",
    );
    let rec = e.record();
    let mut labels: Vec<&str> = rec["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[0].as_str().unwrap())
        .collect();
    labels.sort();
    assert_eq!(labels, ["identify", "import", "translate"]);
    let out = e.heddle(&["run", PIPE, "translat"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: no stage `translat` in pipeline `compile-onnx-dfc` (did you mean `translate`?)\n"
    );
    // The CPU-only warning comes with the toolchain check, before the sweep.
    let run = e.ok(&[
        &["run", PIPE, "identify"][..],
        &SETS[..4],
        &["--set", "level=2"],
    ]
    .concat());
    assert_contains(
        &run,
        "warning  identify  no GPU is visible where the DFC runs",
    );
    let run = e.ok(&[&["run", PIPE][..], SETS].concat());
    let rec = check_run(&e, &run);
    let t = instance(&rec, "translate");
    assert_eq!(t["image"]["reference"], SUITE_IMAGE, "{t}");
    // The user the route names is the container's, and so part of the key.
    assert_eq!(t["key_parts"]["executor"]["user"], "hailo", "{t}");
}

#[test]
fn route_b_a_wheel_in_an_image_heddle_builds() {
    let test = "route_b_a_wheel_in_an_image_heddle_builds";
    let Some(site) = site() else {
        return docker::skip(test, "rapidocr-onnxruntime / scikit-image not installed");
    };
    if !docker::image_ready(test, WHEEL_BASE, BUILD) {
        return;
    }
    let e = empty_project();
    let wheel = double_wheel(&e.project.join("downloads"));
    e.ok(&[
        "init",
        "--example",
        "compile-onnx-dfc",
        "--dfc-wheel",
        &wheel.display().to_string(),
    ]);
    // The recipe's CUDA base is a registry image; here the test's local Debian one stands in.
    let config = e.project.join(".heddle/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}base = \"{WHEEL_BASE}\"\n")).unwrap();
    user_files(&site, &e.project);
    // The same wheel gives the same bytes, so an earlier run's image would be reused: remove it,
    // so this run builds the recipe.
    let digest = {
        let out = Command::new("sha256sum").arg(&wheel).output().unwrap();
        String::from_utf8_lossy(&out.stdout)[..12].to_string()
    };
    let tags = docker::cli(&[
        "images",
        "heddle-dfc",
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ]);
    for t in tags
        .lines()
        .filter(|t| t.starts_with(&format!("heddle-dfc:{digest}-")))
    {
        docker::cli(&["rmi", t]);
    }
    let run = e.ok(&[&["run", PIPE][..], SETS].concat());
    assert_contains(
        &run,
        &format!("building the DFC image heddle-dfc:{digest}-"),
    );
    let rec = check_run(&e, &run);
    let reference = instance(&rec, "translate")["image"]["reference"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reference.starts_with(&format!("heddle-dfc:{digest}-")),
        "{reference} is not keyed by the wheel's sha256 {digest}"
    );
}

#[test]
fn route_c_a_wheel_in_a_host_env() {
    let test = "route_c_a_wheel_in_a_host_env";
    let Some(site) = site() else {
        return docker::skip(test, "rapidocr-onnxruntime / scikit-image not installed");
    };
    let e = empty_project();
    let wheel = double_wheel(&e.project.join("downloads"));
    e.ok(&[
        "init",
        "--example",
        "compile-onnx-dfc",
        "--dfc-wheel",
        &wheel.display().to_string(),
        "--dfc-on-host",
    ]);
    user_files(&site, &e.project);
    let run = e.ok(&[&["run", PIPE][..], SETS].concat());
    let rec = check_run(&e, &run);
    for label in ["identify", "translate", "compile[precision=a8_w8]"] {
        let i = instance(&rec, label);
        assert!(i["image"].is_null(), "{label} ran in a container: {i}");
        assert!(i["env_identity"].is_string(), "{label}: {i}");
    }
}

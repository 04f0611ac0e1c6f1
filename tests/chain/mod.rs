//! The compile-to-device chain (issue 4) through the real `heddle` binary: the stage library in
//! `stages/` and the pipelines `pipelines/mezo-*.toml`, copied into a temp project with its own
//! cache, run with small params.
//!
//! - `ort_chain`: mezo-ort end to end (python env provisioned by heddle), real numbers in the
//!   compare table, a second run all cache hits, a precision added to the matrix runs only its
//!   instances, and the probe is bit-for-bit identical under `--force probe`.
//! - `dfc_pipelines_validate`: `heddle plan` / `heddle dag` of mezo-dfc and mezo-dfc-device.
//! - `dfc_test_double_run`: mezo-dfc in Docker against the TEST DOUBLE of `hailo_sdk_client`
//!   (`tests/images/dfc-double`, built by its build.sh) with `gpus=none`: the two FAILED rows, exit
//!   0, the documented call order, and the degraded-optimisation guard.
//!
//! Docker tests skip with a loud message when the engine or the image is missing, unless
//! HEDDLE_REQUIRE_DOCKER=1 (tests/all.sh sets it when it built the images), which makes that a
//! failure (the harness's Docker guard).

use crate::support;

mod compare_table;
mod dfc;
mod ort;

use std::collections::BTreeSet;

use serde_json::Value;
use support::records::{cached, instances, status};
use support::Project;

const DOUBLE_IMAGE: &str = "heddle-test/dfc-double:latest";

/// Small params: a few minutes for the whole file on a 2-core machine.
const ORT_SMALL: &[&str] = &[
    "--set",
    "samples=64",
    "--set",
    "draws=8",
    "--set",
    "batch=2",
    "--set",
    "bench_seconds=0.5",
];

const DFC_SMALL: &[&str] = &[
    "--set",
    "dfc_image=heddle-test/dfc-double:latest",
    "--set",
    "gpus=none",
    "--set",
    "samples=64",
    "--set",
    "calibset_size=64",
    "--set",
    "draws=4",
    "--set",
    "batch=2",
];

/// Labels that executed (status ok or failed, not served from the cache).
fn ran(rec: &Value) -> BTreeSet<String> {
    instances(rec)
        .into_iter()
        .filter(|(_, i)| !cached(i) && status(i) != "skipped")
        .map(|(l, _)| l)
        .collect()
}

fn output_digest(i: &Value, name: &str) -> String {
    i["outputs"][name]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no digest for output {name}: {i}"))
        .to_string()
}

fn json_file(p: &Project, rel: &str) -> Value {
    serde_json::from_str(&p.read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn set(labels: &[&str]) -> BTreeSet<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

/// Whether the engine has the DFC test double; else the Docker guard's skip (or failure).
fn double_ready(test: &str) -> bool {
    support::docker::image_ready(test, DOUBLE_IMAGE, "tests/images/dfc-double/build.sh")
}

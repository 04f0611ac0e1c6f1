//! The Docker guard: a test that needs the engine (or an image) skips loudly without it, unless
//! `HEDDLE_REQUIRE_DOCKER=1` (tests/all.sh sets it when it built the test images), which makes
//! the absence a failure.

use std::process::{Command, Stdio};

/// Report that `test` cannot run because of `why`: a panic under `HEDDLE_REQUIRE_DOCKER=1`,
/// else a loud notice. Callers return after it.
pub fn skip(test: &str, why: &str) {
    if std::env::var("HEDDLE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: HEDDLE_REQUIRE_DOCKER=1 but {why}");
    }
    eprintln!(
        "\n*** SKIPPED {test}: {why}; set HEDDLE_REQUIRE_DOCKER=1 to make this a failure ***\n"
    );
}

/// Whether the docker CLI reaches an engine.
pub fn engine_reachable() -> bool {
    quiet(&["info", "--format", "{{.ServerVersion}}"])
}

/// Whether the engine has `image`.
pub fn image_present(image: &str) -> bool {
    quiet(&["image", "inspect", image])
}

/// True when the engine and `image` are there; otherwise [`skip`] with the reason (and the
/// script that builds the image) and false.
pub fn image_ready(test: &str, image: &str, build: &str) -> bool {
    if !engine_reachable() {
        skip(test, "no Docker Engine is reachable");
        return false;
    }
    if !image_present(image) {
        skip(test, &format!("image {image} is missing (bash {build})"));
        return false;
    }
    true
}

/// Run the docker CLI, panicking with its stderr on failure; returns trimmed stdout.
pub fn cli(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn quiet(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

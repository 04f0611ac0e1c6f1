//! The real `heddle` binary against the real Docker Engine: container stages store and restore
//! their outputs, a cache hit creates no container, the image id (not the tag) enters the key
//! ([`caching`]); Ctrl-C, timeouts and crashes leave no container behind ([`lifecycle`]); inputs
//! are read-only, the network is off by default, outputs belong to the invoking user
//! ([`sandbox`]); environment problems stop a run before any stage starts ([`environment`]); and
//! a configured host's engine-wide pool is one unit for every heddle using the engine
//! ([`engine_units`]).
//!
//! Containers are counted through the engine: `docker events` (created containers, matched to
//! a run by their `heddle.run` label, [`events`]) and `Engine::count_labelled` (containers that
//! exist now).
//!
//! Every test needs a reachable engine, the docker CLI and the busybox test images (built here
//! through the Engine API when missing). Without them the tests skip loudly, unless
//! `HEDDLE_REQUIRE_DOCKER=1` (CI), which makes a missing engine a failure.

#[path = "../support/mod.rs"]
mod support;

/// `let (d, _gc) = engine!();` opens every test here: the engine and the guard of
/// [`engine_or_skip`], or a return from the test after its skip notice. A test that runs
/// `heddle gc --containers` opens with `engine!(exclusive)` instead ([`engine_exclusive_or_skip`]).
/// A macro because only a macro can return from the test that calls it.
macro_rules! engine {
    () => {
        match $crate::engine_or_skip() {
            Some(held) => held,
            None => return,
        }
    };
    (exclusive) => {
        match $crate::engine_exclusive_or_skip() {
            Some(held) => held,
            None => return,
        }
    };
}

/// `let (p, d, _gc) = busybox_test!(pipeline);`: [`engine!`], then [`busybox_project`] of
/// `pipeline`, as most tests here begin.
macro_rules! busybox_test {
    ($pipeline:expr) => {{
        let (d, gc) = engine!();
        ($crate::busybox_project($pipeline), d, gc)
    }};
}

mod caching;
mod engine_units;
mod environment;
mod events;
mod lifecycle;
mod sandbox;
mod secrets;
mod unprivileged;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use heddle_containers::{test_images, Engine, ImageIdentity, PullPolicy};
use support::{docker, Project};

const BUSYBOX: &str = test_images::BUSYBOX;

/// What every test here needs, set up once per test binary.
struct Docker {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    busybox: ImageIdentity,
    moved: ImageIdentity,
}

static DOCKER: OnceLock<Result<Docker, String>> = OnceLock::new();

/// `heddle gc --containers` removes every heddle container on the engine, running ones
/// included, so the test that runs it holds this lock for writing and every other test holds
/// it for reading.
static GC: RwLock<()> = RwLock::new(());

/// The engine and images, or `None` after the Docker guard's skip notice for the running test
/// (a panic under `HEDDLE_REQUIRE_DOCKER=1`). The returned guard keeps `heddle gc` out while the
/// test runs.
fn engine_or_skip() -> Option<(&'static Docker, RwLockReadGuard<'static, ()>)> {
    match DOCKER.get_or_init(setup) {
        Ok(d) => Some((d, GC.read().unwrap_or_else(|e| e.into_inner()))),
        Err(why) => {
            docker::skip(&docker::current_test(), why);
            None
        }
    }
}

/// [`engine_or_skip`] for a test that runs `heddle gc --containers`, which removes every heddle
/// container on the engine: it holds the guard for writing, so no other test runs meanwhile.
fn engine_exclusive_or_skip() -> Option<(&'static Docker, RwLockWriteGuard<'static, ()>)> {
    let exclusive = GC.write().unwrap_or_else(|e| e.into_inner());
    match DOCKER.get_or_init(setup) {
        Ok(d) => Some((d, exclusive)),
        Err(why) => {
            drop(exclusive);
            docker::skip(&docker::current_test(), why);
            None
        }
    }
}

fn setup() -> Result<Docker, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let engine = rt
        .block_on(Engine::connect(None))
        .map_err(|e| format!("no Docker Engine: {e}"))?;
    match Command::new("docker").arg("version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("the docker CLI is missing or cannot reach the engine".into()),
    }
    let moved = rt
        .block_on(test_images::ensure_busybox_moved(&engine))
        .map_err(|e| {
            format!("cannot build the busybox test images ({e}); run `bash tests/images/build-busybox.sh`")
        })?;
    let busybox = rt
        .block_on(engine.resolve_image(BUSYBOX, PullPolicy::Never))
        .map_err(|e| e.to_string())?;
    Ok(Docker {
        rt,
        engine,
        busybox,
        moved,
    })
}

impl Docker {
    /// Containers that exist now (any state) carrying `key=value`.
    fn count(&self, key: &str, value: &str) -> usize {
        self.rt
            .block_on(self.engine.count_labelled((key, value)))
            .expect("count containers")
    }
}

/// A project whose `p.toml` is `pipeline` with every `__BUSYBOX__` naming the busybox test
/// image (so the text needs no `format!` and no doubled braces).
fn busybox_project(pipeline: &str) -> Project {
    Project::with_pipeline(&pipeline.replace("__BUSYBOX__", BUSYBOX))
}

/// A name no other test (or concurrent test process) uses.
fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

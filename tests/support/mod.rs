//! The one harness every integration test in tests/ shares (`tests/suite.rs` and the `docker`
//! binary each take what they need; the rest is dead code there):
//! - [`project`]: a temp project with its own cache, driven through the real `heddle` binary;
//! - [`records`]: questions asked of a run record (`heddle show last --json`);
//! - [`process`]: waiting on processes and files, signals, whether a pid is alive;
//! - [`docker`]: the guard that skips a test without an engine, or fails it under
//!   `HEDDLE_REQUIRE_DOCKER=1`;
//! - [`expect`]: substring checks that show the whole text when they fail;
//! - [`snapshot`]: user-facing text with its temp paths normalised, for exact-output tests;
//! - [`slurm`]: a real single-node SLURM in a temp folder (root only);
//! - [`require`]: skip a test without its tool, or fail it when the suite requires the tool;
//! - [`tmpfs`]: a full or read-only disk (root only).
#![allow(dead_code, unused_imports)]

pub mod docker;
pub mod expect;
pub mod process;
pub mod project;
pub mod records;
pub mod require;
pub mod slurm;
pub mod snapshot;
#[cfg(target_os = "linux")]
pub mod tmpfs;

pub use expect::{assert_contains, assert_lacks};
pub use process::alive;
pub use project::{bin, copy_tree, fill, repo_root, Project, Run};
pub use records::instance;
pub use require::found_or_skip;

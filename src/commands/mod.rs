//! One module per command (or family of commands): each defines its clap arguments and a
//! function that runs it against a [`crate::session::Session`] and returns the exit code.

pub mod cache;
mod cache_trust;
pub mod cluster;
pub mod dag;
pub mod diff;
mod entry_rerun;
pub mod gc;
pub mod lock;
pub mod logbook;
mod pinned;
pub mod plan;
pub mod report;
pub mod run;
mod run_columns;
pub mod runs;
pub mod schema;
pub mod select;
pub mod shell;
pub mod stages;
pub mod trust;
mod verify;

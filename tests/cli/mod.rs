//! The real `heddle` binary against temp projects: caching and invalidation ([`caching`]),
//! matrices and quoting ([`pipelines`]), failures, signals, crashes and concurrency
//! ([`failures`]), what a run leaves to read ([`records`]), and the exact text of diagnostics,
//! `heddle plan` and `heddle dag` ([`output`], snapshots in `tests/cli/snapshots/`).

mod caching;
mod edited;
mod escapes;
mod failures;
mod output;
mod param_paths;
mod pipelines;
mod quoting;
mod records;
mod secrets;
mod select;
mod stage_errors;
mod trust;

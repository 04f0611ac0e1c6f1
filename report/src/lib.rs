//! heddle's outputs for people. [`entry`] turns a run into a Markdown logbook entry whose
//! generated blocks sit between markers, parses such an entry back, and compares regenerated
//! blocks with the entry number by number ([`compare`]). [`html`] renders a run as one
//! self-contained HTML page (header, DAG, timeline, report tables, plots, slowest instances).
//! [`diff`] compares two runs: params, changed keys, and every report number with its delta.
//! [`artefacts`] reads what report stages produced back from the store; [`headline`] picks the
//! one number `heddle runs` shows per run. None of them runs anything (re-running is the
//! binary's job, through `heddle-runner`), and the records come from `heddle-schema`, so this
//! crate builds without the engine (tokio, bollard).

#[cfg(feature = "runs")]
pub mod artefacts;
pub mod compare;
#[cfg(feature = "runs")]
pub mod diff;
pub mod double;
pub mod entry;
pub mod headline;
pub mod html;

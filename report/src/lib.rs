//! heddle's outputs for people. [`entry`] turns a run into a Markdown logbook entry whose
//! generated blocks sit between markers, parses such an entry back, and compares regenerated
//! blocks with the entry number by number. [`html`] renders a run as one self-contained HTML page
//! (DAG, timeline, slowest instances, report tables, plots). Both read run records and stored
//! artefacts; neither runs anything (re-running is the binary's job, through `heddle-runner`), and the
//! records come from `heddle-schema`, so this crate builds without the engine (tokio, bollard).

pub mod compare;
pub mod entry;
pub mod html;

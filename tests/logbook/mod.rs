//! Lock files and `heddle status` ([`lock`]), logbook entries and `heddle logbook verify`
//! ([`verify`], and every committed entry against an edit in [`committed`]), and the HTML
//! report ([`report`]), through the real binary.

use crate::support;

mod committed;
mod lock;
mod report;
mod verify;

use support::Project;

/// A report stage over a matrix, one instance of which fails (allowed) unless `data/fix` exists.
fn project() -> Project {
    let p = Project::new();
    p.file("data/seed.txt", "3\n")
        .file("p.toml", include_str!("fixtures/project.toml"));
    let text = p
        .read("p.toml")
        .replace("__ROOT__", &p.root().display().to_string());
    p.file("p.toml", &text);
    p
}

/// [`project`] after one run, with a logbook entry made from that run at `entry`: where every
/// verify test starts.
fn project_with_entry(entry: &str) -> Project {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.heddle(&["logbook", "new", "-o", entry]).ok();
    p
}

//! `heddle report`: one run as a self-contained HTML page (DAG, timeline, tables, plots).

use crate::printable::say;
use std::path::PathBuf;

use heddle_report::html;
use heddle_runner::record;

use crate::artefacts::{plots, tables, write_file};
use crate::error::{Error, EXIT_OK};
use crate::session::Session;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    #[arg(default_value = "last")]
    run: String,
    #[arg(short, long, default_value = "report.html")]
    output: PathBuf,
}

pub fn report(s: &Session, a: &ReportArgs) -> Result<i32, Error> {
    let root = s.project_root();
    let rec = record::load(&root, &a.run)?;
    let store = s.open_store()?;
    let t = tables(&store, &root, &rec);
    let p = plots(&store, &root, &rec)?;
    // The page's header names the lock file the run matches, by hash.
    let lock = heddle_report::artefacts::lock_hash(&root, &rec);
    let page = html::render_page(&html::Page {
        record: &rec,
        tables: &t,
        plots: &p,
        lock_hash: lock.as_deref(),
    })
    .map_err(Error::DrawReport)?;
    write_file(&a.output, page)?;
    say!(
        "wrote {} ({} tables, {} plots)",
        a.output.display(),
        t.len(),
        p.len()
    );
    Ok(EXIT_OK)
}

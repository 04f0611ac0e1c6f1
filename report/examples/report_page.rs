//! Render a recorded run's page with its lock hash, as `heddle report` does through
//! [`heddle_report::html::render_page`]; used to make `docs/report.png`.
//!
//! `cargo run --release -p heddle-report --example report_page -- ROOT CACHE_DIR RUN OUT.html`
//! (RUN: a run id, a unique prefix, or `last`).

use std::path::Path;

use heddle_cache::Store;
use heddle_report::{artefacts, html};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [root, cache, run, out] = args.as_slice() else {
        return Err("usage: report_page ROOT CACHE_DIR RUN OUT.html".into());
    };
    let root = Path::new(root);
    let store = Store::open(Path::new(cache))?;
    let rec = heddle_runner::record::load(root, run)?;
    let tables = artefacts::tables(&store, root, &rec);
    let plots = artefacts::plots(&store, root, &rec)?;
    let lock = artefacts::lock_hash(root, &rec);
    let page = html::render_page(&html::Page {
        record: &rec,
        tables: &tables,
        plots: &plots,
        lock_hash: lock.as_deref(),
    })?;
    std::fs::write(out, page)?;
    Ok(())
}

//! `heddle plan`: per instance, whether it is cached or why it must run.

use std::io::Write as _;

use heddle_runner::preview::{preview, CacheHistory, History, PlanRow};
use heddle_runner::run_options::RunOptions;

use crate::error::{Error, EXIT_OK};
use crate::printable::printable_line;
use crate::session::{PipelineArgs, Session};

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    p: PipelineArgs,
    #[arg(long)]
    json: bool,
}

pub async fn plan(s: &Session, a: &PlanArgs) -> Result<i32, Error> {
    let (plan, ctx) = s.prepared(&a.p).await?;
    let history: Box<dyn History> = match s.open_remote(&plan.pipeline.root, ctx.store.clone())? {
        // A local miss the shared cache holds is `cached (remote)`, and its outputs let the
        // plan compute the keys downstream of it, as a run would.
        Some(remote) => Box::new(crate::remote_cache::RemoteHistory::new(
            &ctx.store,
            crate::remote_cache::gate(remote),
        )),
        None => Box::new(CacheHistory::new(&ctx.store)),
    };
    let rows = preview(&ctx, &RunOptions::default(), history.as_ref(), false);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
    } else {
        print_rows(&rows);
    }
    Ok(EXIT_OK)
}

/// One buffered writer: stdout is line-buffered, a write per row costs more than planning the
/// row. A closed pipe (`| head`) ends the listing quietly.
fn print_rows(rows: &[PlanRow]) {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // A matrix value (and so a label, and a reason quoting a param) is the user's text.
    let labels: Vec<_> = rows.iter().map(|r| printable_line(&r.label)).collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    for (r, label) in rows.iter().zip(&labels) {
        let reason = r.reason.to_string();
        let reason = printable_line(&reason);
        let written = if r.cached && r.remote {
            writeln!(out, "cached  {label:width$}  (remote)")
        } else if r.cached {
            writeln!(out, "cached  {label:width$}")
        } else if !r.hosts.is_empty() {
            let on = printable_line(&r.hosts.join(" | ")).into_owned();
            writeln!(out, "run     {label:width$}  {reason}  (on {on})")
        } else {
            writeln!(out, "run     {label:width$}  {reason}")
        };
        if written.is_err() {
            return;
        }
    }
    let cached = rows.iter().filter(|r| r.cached).count();
    let _ = writeln!(
        out,
        "{} instances: {cached} cached, {} to run",
        rows.len(),
        rows.len() - cached
    )
    .and_then(|_| out.flush());
}

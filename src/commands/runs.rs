//! `heddle runs` (the recorded runs, one line each, with each run's headline number and the
//! params it changed: [`super::run_columns`]) and `heddle show` (one run, an instance a line):
//! reading run records back.

use heddle_runner::record::{self, InstanceRecord, RunRecord, Status};

use super::run_columns::{changed_text, columns, RunColumns};
use crate::error::{Error, EXIT_OK};
use crate::printable::{printable_line, say, say_err};
use crate::progress::secs;
use crate::session::{display_rel, Session};
use crate::style::{paint, Stream, Tone};

#[derive(clap::Args, Debug)]
pub struct RunsArgs {
    #[arg(long)]
    json: bool,
    /// Remove every run record but the newest KEEP, then list what is left.
    #[arg(long, value_name = "KEEP")]
    prune: Option<usize>,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    #[arg(default_value = "last")]
    run: String,
    #[arg(long)]
    json: bool,
}

pub fn runs(s: &Session, a: &RunsArgs) -> Result<i32, Error> {
    let root = s.project_root();
    if let Some(keep) = a.prune {
        let p = record::prune(&root, keep)?;
        // On stderr, so `--json` output stays one document.
        say_err!(
            "removed {} run record{} ({}) from {}",
            p.ids.len(),
            if p.ids.len() == 1 { "" } else { "s" },
            super::cache::human(p.bytes),
            display_rel(&record::runs_dir(&root))
        );
    }
    let rows: Vec<RunRecord> = record::list(&root)
        .iter()
        .filter_map(|id| record::load(&root, id).ok())
        .collect();
    if rows.is_empty() && !a.json {
        say!(
            "no runs recorded under {}",
            display_rel(&record::runs_dir(&root))
        );
        return Ok(EXIT_OK);
    }
    let store = if rows.is_empty() {
        None
    } else {
        s.open_store().ok()
    };
    let cols = columns(store.as_deref(), &root, &rows);
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .zip(&cols)
            .map(|(r, c)| {
                let (ran, cached, failed, skipped) = r.counts();
                serde_json::json!({"run_id": r.run_id, "pipeline": r.pipeline, "status": r.status, "duration_ms": r.duration_ms, "ran": ran, "cached": cached, "failed": failed, "skipped": skipped, "previous": c.previous, "changed_params": c.changed, "headline": c.headline})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(EXIT_OK);
    }
    print!("{}", table(&rows, &cols));
    Ok(EXIT_OK)
}

/// One line per run: id, status, pipeline, duration, counts, then (padded so they line up) the
/// headline number (`-` for none) and the params changed against the pipeline's previous run.
/// The headline column is left out when no run has one.
fn table(rows: &[RunRecord], cols: &[RunColumns]) -> String {
    let counts: Vec<String> = rows
        .iter()
        .map(|r| {
            let (ran, cached, failed, skipped) = r.counts();
            format!("ran {ran} cached {cached} failed {failed} skipped {skipped}")
        })
        .collect();
    let heads: Vec<&str> = cols
        .iter()
        .map(|c| c.headline.as_ref().map_or("-", |h| h.value.as_str()))
        .collect();
    let width = |v: &[&str]| v.iter().map(|t| t.chars().count()).max().unwrap_or(0);
    let count_w = width(&counts.iter().map(String::as_str).collect::<Vec<_>>());
    let head_w = if cols.iter().any(|c| c.headline.is_some()) {
        width(&heads)
    } else {
        0
    };
    let mut out = String::new();
    for ((r, c), (count, head)) in rows.iter().zip(cols).zip(counts.iter().zip(&heads)) {
        let mut line = format!(
            "{}  {:<11} {:<16} {:>7}  {count:<count_w$}",
            r.run_id,
            format!("{:?}", r.status).to_lowercase(),
            r.pipeline,
            secs(r.duration_ms)
        );
        if head_w > 0 {
            line.push_str(&format!("  {head:>head_w$}"));
        }
        line.push_str(&format!("  {}", changed_text(&c.changed)));
        // The headline is a stage's table cell, the changed params the user's values.
        out.push_str(&printable_line(line.trim_end()));
        out.push('\n');
    }
    out
}

pub fn show(s: &Session, a: &ShowArgs) -> Result<i32, Error> {
    let r = record::load(&s.project_root(), &a.run)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).expect("json"));
        return Ok(EXIT_OK);
    }
    let (ran, cached, failed, skipped) = r.counts();
    say!(
        "run {}  pipeline {}  {:?}  {}",
        r.run_id,
        r.pipeline,
        r.status,
        secs(r.duration_ms)
    );
    println!("ran {ran}, cached {cached}, failed {failed}, skipped {skipped}");
    let labels: Vec<_> = r.instances.iter().map(|(l, _)| printable_line(l)).collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    for ((_, i), label) in r.instances.iter().zip(&labels) {
        let why = if i.cached || i.status.status == Status::Skipped {
            String::new()
        } else {
            format!("  [{}]", printable_line(&i.reason.to_string()))
        };
        println!("  {label:width$}  {}{why}", state(i));
    }
    Ok(EXIT_OK)
}

/// How an instance ended, as `show` prints it.
fn state(i: &InstanceRecord) -> String {
    match (i.status.status, i.cached) {
        (Status::Ok, true) => paint(Stream::Stdout, Tone::Cached, "cached"),
        (Status::Ok, false) => format!(
            "{} {}",
            paint(Stream::Stdout, Tone::Ok, "ok"),
            secs(i.duration_ms)
        ),
        (Status::Failed, _) => format!(
            "{} {}",
            paint(Stream::Stdout, Tone::Failed, "FAILED"),
            printable_line(i.status.error.as_deref().unwrap_or(""))
        ),
        (Status::Skipped, _) => format!(
            "skipped ({})",
            printable_line(
                i.status
                    .cause
                    .as_ref()
                    .map(|c| c.label.as_str())
                    .unwrap_or("")
            )
        ),
    }
}

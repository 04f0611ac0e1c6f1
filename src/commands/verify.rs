//! `heddle logbook verify`: rerun what an entry names (from the cache, or re-executed in a
//! private cache) and judge every number of its tables and every failure it recorded.

use crate::printable::say;
use std::path::Path;
use std::sync::Arc;

use heddle_cache::Store;
use heddle_report::compare::{compare_blocks, Rule, Tolerance};
use heddle_report::entry::{self, Block, Table};
use heddle_runner::model::value_text;
use heddle_runner::record::{self, RunRecord};

use super::entry_rerun::{overrides, pipeline_file, read_entry, rerun_options, Rerun};
use crate::artefacts::tables;
use crate::error::{Error, EXIT_OK, EXIT_STAGE_FAILED};
use crate::session;

pub struct VerifyOptions {
    pub fresh: bool,
    pub runs: usize,
    /// A tolerance given on the command line; it overrides what the entry states or prints.
    pub tol: Option<Tolerance>,
}

/// Values judged so far, over every rerun.
#[derive(Default)]
struct Verdicts {
    good: usize,
    bad: usize,
    /// Numbers the rerun produced that the entry did not record.
    unrecorded: usize,
}

/// The rule a block's numbers are judged by: the command line's tolerance, else the one the
/// block states, else the digits the entry printed.
fn rule_for(b: &Block, cli: Option<Tolerance>, path: &Path) -> Result<Rule, Error> {
    if let Some(t) = cli {
        return Ok(Rule::Stated(t));
    }
    let stated = b.stated_tolerance().map_err(|problem| Error::BadEntry {
        path: path.to_path_buf(),
        problem,
    })?;
    Ok(stated.map_or(Rule::Printed, Rule::Stated))
}

pub async fn verify(entry_path: &Path, rr: &Rerun<'_>, opts: &VerifyOptions) -> Result<i32, Error> {
    let e = read_entry(entry_path)?;
    let (named, file) = pipeline_file(&e, rr.root)?;
    let sets = overrides(&e)?;
    check_params(entry_path, &named, &file, &sets, &rr.store)?;
    let rules = e
        .blocks()
        .map(|b| rule_for(b, opts.tol, entry_path))
        .collect::<Result<Vec<_>, _>>()?;
    let runs = opts.runs.max(1);
    let mut v = Verdicts::default();
    for n in 1..=runs {
        let (_private, store) = rerun_store(opts.fresh, &rr.store)?;
        say!(
            "== verify {} run {n}/{runs}{}",
            entry_path.display(),
            if opts.fresh {
                " (fresh: every instance re-executed in a private cache)"
            } else {
                " (from the cache)"
            }
        );
        let mut rec = session::rerun(
            &file,
            &sets,
            store.clone(),
            Some(rr.store.clone()),
            rerun_options(opts.fresh),
            rr.progress,
        )
        .await
        .map_err(|source| Error::CannotVerify {
            entry: entry_path.to_path_buf(),
            pipeline_file: named.clone(),
            source: Box::new(source),
        })?;
        let _ = record::save(rr.root, &mut rec);
        let tables = tables(&store, rr.root, &rec);
        for (b, rule) in e.blocks().zip(&rules) {
            match b.kind.as_str() {
                "table" => judge_table(b, *rule, &tables, n == 1, &mut v),
                "failures" => judge_failures(b, &rec, &mut v),
                _ => {}
            }
        }
    }
    say!(
        "verify: {} values reproduced, {} differ{}{}",
        v.good,
        v.bad,
        if v.unrecorded > 0 {
            format!(", {} not recorded in the entry", v.unrecorded)
        } else {
            String::new()
        },
        if v.bad == 0 && v.unrecorded == 0 {
            " — the entry reproduces"
        } else {
            ""
        }
    );
    Ok(if v.bad == 0 {
        EXIT_OK
    } else {
        EXIT_STAGE_FAILED
    })
}

/// The entry's params must be ones its pipeline accepts, as a `--set` would be checked (a
/// declared param, of its type; every template they reach rendered safely), before anything
/// runs; then the params the rerun will use are printed, every one of them.
fn check_params(
    entry: &Path,
    named: &str,
    file: &Path,
    sets: &[(String, String)],
    store: &Store,
) -> Result<(), Error> {
    let cannot_run = |source| Error::CannotVerify {
        entry: entry.to_path_buf(),
        pipeline_file: named.to_string(),
        source: Box::new(source),
    };
    // Planned too: a param's value is checked against a definition's `choices` per instance.
    let planned = |sets: &[(String, String)]| -> Result<_, Error> {
        let pipeline = session::load_for_rerun(file, sets, store)?;
        Ok(heddle_runner::plan::build(std::sync::Arc::new(pipeline))?)
    };
    planned(&[]).map_err(cannot_run)?;
    let plan = planned(sets).map_err(|source| Error::BadEntryParams {
        entry: entry.to_path_buf(),
        pipeline_file: named.to_string(),
        source: Box::new(source),
    })?;
    let pipeline = &plan.pipeline;
    if pipeline.params.is_empty() {
        say!("params  (none)");
    }
    for (k, v) in &pipeline.params {
        let from = if sets.iter().any(|(s, _)| s == k) {
            "entry"
        } else {
            "pipeline default"
        };
        say!("params  {k} = {}  ({from})", value_text(v));
    }
    Ok(())
}

/// The store a rerun writes to: the user's, or for `--fresh` a private one in a temp folder
/// (removed when the returned guard drops, after the rerun is judged).
fn rerun_store(
    fresh: bool,
    shared: &Arc<Store>,
) -> Result<(Option<tempfile::TempDir>, Arc<Store>), Error> {
    if !fresh {
        return Ok((None, shared.clone()));
    }
    let dir = tempfile::tempdir().map_err(|source| Error::Io {
        op: "cannot create a private cache in",
        path: std::env::temp_dir(),
        source,
    })?;
    let store = Store::open(dir.path()).map_err(|source| Error::OpenCache {
        dir: dir.path().to_path_buf(),
        source,
    })?;
    Ok((Some(dir), Arc::new(store)))
}

/// Every number of a table block against the same table of the rerun.
fn judge_table(b: &Block, rule: Rule, tables: &[Table], first: bool, v: &mut Verdicts) {
    let src = b.src().unwrap_or("");
    if first {
        say!("table {src}: numbers must agree {rule}");
    }
    let Some(t) = tables.iter().find(|t| t.src == src) else {
        v.bad += 1;
        say!("DIFF  table {src}: not produced by this run");
        return;
    };
    for c in compare_blocks(&b.body, &t.markdown, rule) {
        if !c.recorded {
            v.unrecorded += 1;
            say!(
                "new   {src} {}: now {} (the entry did not record it)",
                c.place,
                c.now
            );
        } else if c.ok {
            v.good += 1;
            say!("ok    {src} {}: {} | {}", c.place, c.entry, c.now);
        } else {
            v.bad += 1;
            let allowed = c
                .allowed
                .map(|a| format!(" (allowed {a})"))
                .unwrap_or_default();
            say!(
                "DIFF  {src} {}: entry {} | now {}{allowed}",
                c.place,
                c.entry,
                c.now
            );
        }
    }
}

/// The failures an entry recorded against the rerun's: each must fail the same way, and
/// nothing else may fail.
fn judge_failures(b: &Block, rec: &RunRecord, v: &mut Verdicts) {
    let was = entry::parse_failures(&b.body);
    let now = entry::parse_failures(&entry::failures_block(rec));
    for (label, (state, class)) in &was {
        match now.get(label) {
            Some((s2, c2)) if s2 == state && c2 == class => {
                v.good += 1;
                say!("ok    failure {label}: {state} {class} reproduced");
            }
            Some((s2, c2)) => {
                v.bad += 1;
                say!("DIFF  failure {label}: entry {state} {class} | now {s2} {c2}");
            }
            None => {
                v.bad += 1;
                say!("DIFF  failure {label}: entry {state} {class} | now it succeeds");
            }
        }
    }
    for (label, (state, class)) in &now {
        if !was.contains_key(label) {
            v.bad += 1;
            say!("DIFF  failure {label}: entry ok | now {state} {class}");
        }
    }
}

//! `heddle run`: run a pipeline, save its record, write its lock when it completed, and print
//! the summary (what ran, where the outputs and tables are, which instances failed and why).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use heddle_runner::lock;
use heddle_runner::plan::Plan;
use heddle_runner::record::{self, ErrorClass, RunRecord, RunStatus, Status};
use heddle_runner::sched::{self, RunOptions};

use crate::error::{Error, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_STAGE_FAILED};
use crate::printable::printable;
use crate::progress::{secs, ProgressMode};
use crate::session::{self, default_jobs, display_rel, PipelineArgs, Session};
use crate::style::{paint, Stream, Tone};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    p: PipelineArgs,
    /// Instances executing at once on this machine (a stage placed on a configured host is
    /// bounded by that host's pools instead).
    #[arg(long, short = 'j', default_value_t = default_jobs())]
    jobs: usize,
    /// Finish independent branches after a failure.
    #[arg(long)]
    keep_going: bool,
    /// Run this stage's instances even when cached (repeatable).
    #[arg(long, value_name = "STAGE")]
    force: Vec<String>,
    /// Ignore the cache for every stage (results are still stored).
    #[arg(long)]
    no_cache: bool,
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
}

pub async fn run(s: &Session, a: &RunArgs) -> Result<i32, Error> {
    let plan = Arc::new(s.load_plan(&a.p)?);
    check_forced(&plan, &a.force)?;
    let store = s.open_store()?;
    let remote = s
        .open_remote(&plan.pipeline.root, store.clone())?
        .map(crate::remote_cache::gate);
    let opts = RunOptions {
        jobs: a.jobs.max(1),
        keep_going: a.keep_going,
        force: a.force.iter().cloned().collect(),
        no_cache: a.no_cache,
        run_id: record::new_run_id(),
        remote: remote.clone(),
    };
    let rec = session::execute(plan.clone(), store, None, opts, a.progress).await?;
    let saved = record::save(&plan.pipeline.root, &rec);
    print_summary(&plan, &rec);
    if let Some(g) = &remote {
        let (fetched, pushed) = g.counts();
        eprintln!(
            "remote cache {}: {fetched} fetched, {pushed} uploaded{}",
            g.describe(),
            if g.is_down() { " (unavailable)" } else { "" }
        );
    }
    match saved {
        Ok(path) => eprintln!("run {}: {}", rec.run_id, display_rel(&path)),
        Err(e) => eprintln!("warning: failed to save the run record: {e}"),
    }
    if rec.status == RunStatus::Completed {
        let path = lock::lock_path(&plan.pipeline.file);
        match lock::write_from_record(&rec, &path, &lock::stamps_dir(&plan.pipeline.root)) {
            Ok(_) => eprintln!("lock: {}", display_rel(&path)),
            Err(e) => eprintln!("warning: {e}"),
        }
    }
    print_failures(&rec);
    Ok(exit_code(&rec))
}

/// Every `--force STAGE` must name a stage of the pipeline.
fn check_forced(plan: &Plan, force: &[String]) -> Result<(), Error> {
    let known: BTreeSet<&str> = plan
        .pipeline
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    match force.iter().find(|f| !known.contains(f.as_str())) {
        Some(f) => Err(Error::Usage(format!(
            "--force {f}: no such stage (stages: {})",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        ))),
        None => Ok(()),
    }
}

/// The summary line, where the outputs went and the report tables.
fn print_summary(plan: &Plan, rec: &RunRecord) {
    let (ran, cached, failed, skipped) = rec.counts();
    let out_dir = sched::output_dir(plan, "");
    eprintln!(
        "{} {}: {} instances — {ran} ran, {cached} cached, {failed} failed, {skipped} skipped in {}",
        match rec.status {
            RunStatus::Completed => paint(Stream::Stderr, Tone::Ok, "done"),
            RunStatus::Failed => paint(Stream::Stderr, Tone::Failed, "FAILED"),
            RunStatus::Interrupted => "INTERRUPTED".to_string(),
        },
        rec.pipeline,
        rec.instances.len(),
        secs(rec.duration_ms)
    );
    eprintln!("outputs: {}", display_rel(&out_dir));
    for (_, r) in rec
        .instances
        .iter()
        .filter(|(_, r)| r.report && r.status.status == Status::Ok)
    {
        for p in r.output_paths.values().filter(|p| p.ends_with(".md")) {
            eprintln!("table: {}", display_rel(&plan.pipeline.root.join(p)));
        }
    }
}

/// Each failed instance and, when it wrote to stderr, its log (the whole traceback). Its error
/// line was printed once already, when it failed.
fn print_failures(rec: &RunRecord) {
    for (label, r) in &rec.instances {
        if r.status.status == Status::Failed {
            eprintln!(
                "  {} {}",
                printable(label),
                paint(Stream::Stderr, Tone::Failed, "FAILED"),
            );
            // A stage that printed nothing to stderr has no log file.
            if let Some([_, err]) = r.logs.as_ref().filter(|[_, e]| Path::new(e).exists()) {
                eprintln!("    log: {}", display_rel(Path::new(err)));
            }
        }
    }
}

/// 0 completed, 130 interrupted; a failed run is 1 when a stage failed, and 2 when heddle
/// itself could not do its part (the cache could not store or place an output: a full disk,
/// an unwritable cache), which is the environment's fault and not the stage's.
fn exit_code(rec: &RunRecord) -> i32 {
    match rec.status {
        RunStatus::Completed => EXIT_OK,
        RunStatus::Interrupted => EXIT_INTERRUPTED,
        RunStatus::Failed => {
            let environment = rec.instances.iter().any(|(_, r)| {
                r.status.status == Status::Failed
                    && !r.status.tolerated
                    && r.status.error_class == Some(ErrorClass::HeddleError)
            });
            if environment {
                EXIT_INVALID
            } else {
                EXIT_STAGE_FAILED
            }
        }
    }
}

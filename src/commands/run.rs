//! `heddle run`: run a pipeline, save its record, write its lock when it completed, and print
//! the summary (what ran, where the outputs and tables are, which instances failed and why).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use heddle_containers::Engine;
use heddle_runner::lock;
use heddle_runner::outputs::output_dir;
use heddle_runner::plan::Plan;
use heddle_runner::record::{self, ErrorClass, RunRecord, RunStatus, Status};
use heddle_runner::run_options::RunOptions;

use crate::dfc::Route;
use crate::error::{Error, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_STAGE_FAILED};
use crate::printable::{printable_line, say_err};
use crate::progress::{secs, ProgressMode};
use crate::session::{self, default_jobs, display_rel, PipelineArgs, Session};
use crate::style::{paint, Stream, Tone};

#[path = "run_outcome.rs"]
mod outcome;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    p: PipelineArgs,
    /// Run only these stages and the stages they read from (as `dvc repro STAGE`); the lock file
    /// is left alone, since it describes the whole pipeline.
    #[arg(value_name = "STAGE", num_args = 0.., requires = "pipeline")]
    stages: Vec<String>,
    /// The same as naming the stages after the pipeline (repeatable): `--until optimize`.
    #[arg(long, value_name = "STAGE")]
    until: Vec<String>,
    /// Exit 1 when any instance failed, allowed (`allow_failure`) or not: for CI.
    #[arg(long)]
    strict: bool,
    /// Instances executing at once on this machine (a stage placed on a configured host is
    /// bounded by that host's pools instead).
    #[arg(long, short = 'j', default_value_t = default_jobs())]
    jobs: usize,
    /// Finish independent branches after a failure.
    #[arg(long)]
    keep_going: bool,
    /// Run this stage's instances even when cached (repeatable).
    #[arg(long, value_name = "STAGE",
          add = clap_complete::engine::ArgValueCompleter::new(crate::completion::stages))]
    force: Vec<String>,
    /// Ignore the cache for every stage (results are still stored).
    #[arg(long)]
    no_cache: bool,
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// Run every miss as a job on this cluster (`[clusters.NAME]` in hosts.toml); needs a
    /// shared cache.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
}

pub async fn run(s: &Session, a: &RunArgs) -> Result<i32, Error> {
    let only: Vec<String> = a.stages.iter().chain(&a.until).cloned().collect();
    let (plan, route) = s.load_routed(&a.p, &only)?;
    let plan = Arc::new(plan);
    check_forced(&plan, &a.force)?;
    if let Route::WheelImage(recipe) = &route {
        let engine = Engine::connect(None)
            .await
            .map_err(|e| Error::Engine(Box::new(e)))?;
        recipe
            .ensure(&engine, &|m| eprintln!("note    {m}"))
            .await?;
    }
    let store = s.open_store()?;
    let remote = s
        .open_remote(&plan.pipeline.root, store.clone())?
        .map(crate::remote_cache::gate);
    let run_id = record::new_run_id();
    let cluster = match super::cluster::chosen(a.cluster.as_deref(), &plan) {
        Some((name, origin)) => {
            let driver =
                super::cluster::driver(s, &plan, (&name, &origin), store.clone(), &run_id)?;
            driver
                .ready()
                .await
                .map_err(|e| Error::Usage(format!("{origin}: {e}")))?;
            Some(driver)
        }
        None => None,
    };
    let opts = RunOptions {
        jobs: a.jobs.max(1),
        keep_going: a.keep_going,
        force: a.force.iter().cloned().collect(),
        no_cache: a.no_cache,
        run_id,
        remote: remote.clone(),
        cluster: cluster.clone(),
    };
    let mut rec = session::execute(plan.clone(), store, None, opts, a.progress).await?;
    if let Some(c) = &cluster {
        // Each job was cancelled by id already; the sweep catches what a lost reply or a
        // job submitted as the run stopped left behind.
        if rec.status != RunStatus::Completed {
            if let Err(e) = c.sweep().await {
                eprintln!("warning: cluster {}: {e}", c.cluster.name);
            }
        }
        eprintln!("{}", c.summary());
    }
    let saved = record::save(&plan.pipeline.root, &mut rec);
    print_summary(&plan, &rec);
    if let Some(g) = &remote {
        let (fetched, pushed) = g.counts();
        say_err!(
            "remote cache {}: {fetched} fetched, {pushed} uploaded{}",
            g.describe(),
            if g.is_down() { " (unavailable)" } else { "" }
        );
    }
    match saved {
        Ok(path) => say_err!("run {}: {}", rec.run_id, display_rel(&path)),
        Err(e) => say_err!("warning: failed to save the run record: {e}"),
    }
    if rec.status == RunStatus::Completed && !only.is_empty() {
        eprintln!(
            "lock: {} left as it was (this run ran only {} and what it needs)",
            display_rel(&lock::lock_path(&plan.pipeline.file)),
            only.join(", ")
        );
    } else if rec.status == RunStatus::Completed {
        let path = lock::lock_path(&plan.pipeline.file);
        match lock::write_from_record(&rec, &path, &lock::stamps_dir(&plan.pipeline.root)) {
            Ok(_) => say_err!("lock: {}", display_rel(&path)),
            Err(e) => say_err!("warning: {}", heddle_cache::error_chain(&e)),
        }
    }
    print_failures(&rec);
    let code = exit_code(&rec, a.strict);
    if let Some(line) = outcome::last_line(&rec, a.strict) {
        eprintln!("{line}");
    }
    // The process exits next. Freeing the records and the plan one allocation at a time is
    // ~2 % of a 100k no-op (several allocations per instance) that nobody waits for; the
    // kernel takes the memory back at once. Both are plain data: no file or child to close.
    std::mem::forget(rec);
    std::mem::forget(plan);
    Ok(code)
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
        Some(f) => {
            let names: Vec<&str> = known.iter().copied().collect();
            let hint = heddle_runner::diag::did_you_mean(f, &names, || {
                format!("stages: {}", names.join(", "))
            });
            Err(Error::Usage(format!("--force {f}: no such stage ({hint})")))
        }
        None => Ok(()),
    }
}

/// The summary line, where the outputs went and the report tables.
fn print_summary(plan: &Plan, rec: &RunRecord) {
    let (ran, cached, failed, skipped) = rec.counts();
    let out_dir = output_dir(plan, "");
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
    say_err!("outputs: {}", display_rel(&out_dir));
    for (label, r) in rec
        .instances
        .iter()
        .filter(|(_, r)| r.report && r.status.status == Status::Ok)
    {
        let double = outcome::double_label(rec, label);
        for p in r.output_paths.values().filter(|p| p.ends_with(".md")) {
            say_err!(
                "table: {}{double}",
                display_rel(&plan.pipeline.root.join(p))
            );
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
                printable_line(label),
                paint(Stream::Stderr, Tone::Failed, "FAILED"),
            );
            if r.status
                .error
                .as_deref()
                .is_some_and(outcome::no_gpu_runtime)
            {
                eprintln!("    hint: {}", outcome::NO_GPU_HINT);
            }
            // A stage that printed nothing to stderr has no log file.
            if let Some([_, err]) = r.logs.as_deref().filter(|[_, e]| Path::new(e).exists()) {
                say_err!("    log: {}", display_rel(Path::new(err)));
            }
        }
    }
}

/// 0 completed, 130 interrupted; a failed run is 1 when a stage failed, and 2 when heddle
/// itself could not do its part (the cache could not store or place an output: a full disk,
/// an unwritable cache), which is the environment's fault and not the stage's.
///
/// With `strict`, a completed run with any failure (allowed ones included) is 1 too.
fn exit_code(rec: &RunRecord, strict: bool) -> i32 {
    match rec.status {
        RunStatus::Completed if strict && outcome::any_failed(rec) => EXIT_STAGE_FAILED,
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

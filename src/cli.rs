//! Argument parsing and the commands. Holds no engine logic: each command loads, plans and
//! prepares through `heddle-runner` and prints what comes back.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use heddle_cache::{Digest, StatCache, Store};
use heddle_runner::lock::{self, LockFile};
use heddle_runner::model::{self, LoadError, LoadOptions};
use heddle_runner::out_lock::OutLock;
use heddle_runner::plan::{self, Plan};
use heddle_runner::prepare::{prepare, PrepareError, PrepareOptions};
use heddle_runner::record::{self, RunStatus, Status};
use heddle_runner::sched::{self, RunOptions};

use crate::logbook;
use crate::report::{self, secs, ProgressMode};

pub const EXIT_OK: i32 = 0;
pub const EXIT_STAGE_FAILED: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Parser, Debug)]
#[command(
    name = "heddle",
    version,
    about = "Declarative TOML pipelines, content-addressed and reproducible"
)]
struct Cli {
    /// Cache directory (default: $XDG_CACHE_HOME/heddle or ~/.cache/heddle).
    #[arg(long, global = true, env = "HEDDLE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Project root (default: the nearest folder above the pipeline with stages/, .heddle/ or .git).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Shared cache to read through and write back (s3://bucket/prefix, webdav+http://host/path,
    /// file:///dir); also `HEDDLE_REMOTE_CACHE` or `[cache] remote` in .heddle/config.toml or
    /// ~/.config/heddle/config.toml.
    #[arg(long, global = true, value_name = "URL")]
    remote_cache: Option<String>,
    /// read: only fetch from the shared cache; readwrite (default): also upload what runs here.
    #[arg(long, global = true, value_name = "MODE")]
    remote_cache_mode: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct PipelineArgs {
    /// The pipeline file (default: ./heddle.toml, or the only file in ./pipelines/).
    pipeline: Option<PathBuf>,
    /// Override a param: --set name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a pipeline: every instance whose inputs changed, the rest from the cache.
    Run {
        #[command(flatten)]
        p: PipelineArgs,
        /// Instances executing at once.
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
    },
    /// The stage definitions `uses` can name: the project's `stages/`, then heddle's library.
    Stages {
        #[command(subcommand)]
        cmd: StagesCmd,
    },
    /// Scaffold a project in DIR: `.heddle/`, `.gitignore`, `pipelines/EXAMPLE.toml`.
    Init {
        /// compile-onnx (any ONNX + images) or mezo-ort.
        #[arg(long, default_value = "compile-onnx")]
        example: String,
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Say, per instance, whether it is cached or why it must run.
    Plan {
        #[command(flatten)]
        p: PipelineArgs,
        #[arg(long)]
        json: bool,
    },
    /// Write the lock file from the cache (every instance must be cached).
    Lock {
        #[command(flatten)]
        p: PipelineArgs,
    },
    /// Compare the pipeline as it stands with its lock file: what changed and why.
    Status {
        #[command(flatten)]
        p: PipelineArgs,
        /// Exit 1 when anything differs from the lock.
        #[arg(long)]
        check: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print the instance graph.
    Dag {
        #[command(flatten)]
        p: PipelineArgs,
        #[arg(long, value_enum, default_value_t = DagFormat::Text)]
        format: DagFormat,
    },
    /// List recorded runs.
    Runs {
        #[arg(long)]
        json: bool,
    },
    /// Show one run (an id, a unique prefix, or `last`).
    Show {
        #[arg(default_value = "last")]
        run: String,
        #[arg(long)]
        json: bool,
    },
    /// Inspect and maintain the cache.
    Cache {
        #[command(subcommand)]
        cmd: CacheCmd,
    },
    /// Write a logbook entry from a run, verify an entry by rerunning it, or refresh its blocks.
    Logbook {
        #[command(subcommand)]
        cmd: LogbookCmd,
    },
    /// Render a run as one self-contained HTML page.
    Report {
        #[arg(default_value = "last")]
        run: String,
        #[arg(short, long, default_value = "report.html")]
        output: PathBuf,
    },
    /// Remove containers a crashed run left behind.
    Gc {
        /// Remove every container labelled heddle.managed=true.
        #[arg(long)]
        containers: bool,
        /// Docker host (default: DOCKER_HOST or the local socket).
        #[arg(long)]
        docker_host: Option<String>,
        /// Also remove containers of heddle runs that are still going.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand, Debug)]
enum CacheCmd {
    /// Space used, per pipeline stage.
    Du,
    /// Evict what recent runs do not reference, cheapest to recompute per byte first.
    Gc {
        /// Evict until the store is at most this size (e.g. 20G); default: evict everything unreferenced.
        #[arg(long)]
        max_size: Option<String>,
        /// How many recent runs of this project to keep.
        #[arg(long, default_value_t = 10)]
        keep_runs: usize,
    },
    /// Re-hash every blob and report every bad entry.
    Verify,
    /// Upload to the shared cache what a run (default: the last) or a lock file references.
    Push {
        /// A run id, a unique prefix, or `last`.
        #[arg(conflicts_with = "lock")]
        run: Option<String>,
        /// A lock file whose instances to upload.
        #[arg(long, value_name = "FILE")]
        lock: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum LogbookCmd {
    /// Write a Markdown entry from a run (default: the last).
    New {
        #[arg(default_value = "last")]
        run: String,
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long)]
        title: Option<String>,
    },
    /// Rerun what an entry names and compare every number and failure with it.
    Verify {
        entry: PathBuf,
        /// Re-execute every instance in a private cache.
        #[arg(long)]
        fresh: bool,
        /// How many times to rerun.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Judge every number within this relative tolerance instead of to the digits the entry
        /// printed (the default) or the tolerance a block states.
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute tolerance, with or instead of --rtol.
        #[arg(long)]
        atol: Option<f64>,
        #[arg(long, value_enum, default_value_t = ProgressMode::Quiet)]
        progress: ProgressMode,
    },
    /// Rewrite an entry's marked blocks from a new run (text outside the markers is kept).
    Refresh {
        entry: PathBuf,
        #[arg(long, value_enum, default_value_t = ProgressMode::Quiet)]
        progress: ProgressMode,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DagFormat {
    Text,
    Dot,
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// A failure the binary reports: a headline and an exit code.
pub struct Fail {
    pub code: i32,
    pub msg: String,
}

impl Fail {
    pub fn invalid(msg: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_INVALID,
            msg: msg.into(),
        }
    }
}

impl From<LoadError> for Fail {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::Invalid(d) => Fail::invalid(d.to_string()),
            LoadError::Read { path, source } => Fail::invalid(format!(
                "error: cannot read pipeline {}: {source}",
                path.display()
            )),
            LoadError::Usage(m) => Fail::invalid(format!("error: {m}")),
        }
    }
}

impl From<PrepareError> for Fail {
    fn from(e: PrepareError) -> Self {
        Fail::invalid(format!("error: {e}"))
    }
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                EXIT_INVALID
            } else {
                EXIT_OK
            };
            let _ = e.print();
            return code;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("HEDDLE_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("{}", f.msg);
            f.code
        }
    }
}

fn cache_dir(cli: &Cli) -> PathBuf {
    if let Some(d) = &cli.cache_dir {
        return d.clone();
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("heddle");
    }
    if cfg!(windows) {
        if let Some(l) = std::env::var_os("LOCALAPPDATA") {
            return PathBuf::from(l).join("heddle");
        }
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("heddle"),
        None => PathBuf::from(".heddle-cache"),
    }
}

fn open_store(cli: &Cli) -> Result<Arc<Store>, Fail> {
    let dir = cache_dir(cli);
    Store::open(&dir).map(Arc::new).map_err(|e| {
        Fail::invalid(format!(
            "error: cannot open the cache at {}: {e}",
            dir.display()
        ))
    })
}

fn find_pipeline(given: &Option<PathBuf>) -> Result<PathBuf, Fail> {
    if let Some(p) = given {
        return Ok(p.clone());
    }
    if Path::new("heddle.toml").is_file() {
        return Ok("heddle.toml".into());
    }
    let found: Vec<PathBuf> = std::fs::read_dir("pipelines")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    match found.len() {
        1 => Ok(found[0].clone()),
        0 => Err(Fail::invalid(
            "error: no pipeline given, and neither ./heddle.toml nor ./pipelines/*.toml exists",
        )),
        _ => {
            let mut names: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
            names.sort();
            Err(Fail::invalid(format!(
                "error: several pipelines; name one of: {}",
                names.join(", ")
            )))
        }
    }
}

fn load_plan(cli: &Cli, p: &PipelineArgs) -> Result<Plan, Fail> {
    let file = find_pipeline(&p.pipeline)?;
    let mut overrides = Vec::new();
    for s in &p.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| Fail::invalid(format!("error: --set {s}: expected NAME=VALUE")))?;
        overrides.push((k.trim().to_string(), v.to_string()));
    }
    let pipeline = model::load(
        &file,
        &LoadOptions {
            overrides,
            root: cli.root.clone(),
            stage_lib: Some(cache_dir(cli).join("stage-lib")),
        },
    )?;
    plan::build(Arc::new(pipeline)).map_err(|d| Fail::invalid(d.to_string()))
}

fn stat_cache(plan: &Plan) -> Arc<StatCache> {
    Arc::new(StatCache::load(
        &plan.pipeline.root.join(".heddle").join("stat-cache"),
    ))
}

#[derive(Subcommand, Debug)]
enum StagesCmd {
    /// Every definition: name, origin (project or library), first line of its description.
    List,
    /// One definition: params (type, default, description), inputs, outputs.
    Show { name: String },
}

async fn dispatch(cli: Cli) -> Result<i32, Fail> {
    let lib_base = || cache_dir(&cli).join("stage-lib");
    match &cli.cmd {
        Cmd::Stages { cmd } => {
            let out = match cmd {
                StagesCmd::List => crate::stages_cmd::list(&project_root(&cli), &lib_base())?,
                StagesCmd::Show { name } => {
                    crate::stages_cmd::show(&project_root(&cli), name, &lib_base())?
                }
            };
            print!("{out}");
            Ok(0)
        }
        Cmd::Init { example, dir } => {
            print!("{}", crate::stages_cmd::init(dir, example)?);
            Ok(0)
        }
        Cmd::Run {
            p,
            jobs,
            keep_going,
            force,
            no_cache,
            progress,
        } => {
            let plan = Arc::new(load_plan(&cli, p)?);
            let known: BTreeSet<&str> = plan
                .pipeline
                .stages
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            for f in force {
                if !known.contains(f.as_str()) {
                    return Err(Fail::invalid(format!(
                        "error: --force {f}: no such stage (stages: {})",
                        known.iter().copied().collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            let store = open_store(&cli)?;
            let remote = open_remote(&cli, &plan.pipeline.root, store.clone())?
                .map(crate::remote_cache::gate);
            let opts = RunOptions {
                jobs: (*jobs).max(1),
                keep_going: *keep_going,
                force: force.iter().cloned().collect(),
                no_cache: *no_cache,
                run_id: record::new_run_id(),
                remote: remote.clone(),
            };
            let rec = execute(plan.clone(), store, None, opts, *progress).await?;
            let saved = record::save(&plan.pipeline.root, &rec);
            let (ran, cached, failed, skipped) = rec.counts();
            let out_dir = sched::output_dir(&plan, "");
            eprintln!(
                "{} {}: {} instances — {ran} ran, {cached} cached, {failed} failed, {skipped} skipped in {}",
                match rec.status {
                    RunStatus::Completed => "done",
                    RunStatus::Failed => "FAILED",
                    RunStatus::Interrupted => "INTERRUPTED",
                },
                rec.pipeline,
                rec.instances.len(),
                secs(rec.duration_ms)
            );
            eprintln!("outputs: {}", display_rel(&out_dir));
            if let Some(g) = &remote {
                let (fetched, pushed) = g.counts();
                eprintln!(
                    "remote cache {}: {fetched} fetched, {pushed} uploaded{}",
                    g.describe(),
                    if g.is_down() { " (unavailable)" } else { "" }
                );
            }
            for (_, r) in rec
                .instances
                .iter()
                .filter(|(_, r)| r.report && r.status.status == Status::Ok)
            {
                for p in r.output_paths.values().filter(|p| p.ends_with(".md")) {
                    eprintln!("table: {}", display_rel(&plan.pipeline.root.join(p)));
                }
            }
            match saved {
                Ok(path) => eprintln!("run {}: {}", rec.run_id, display_rel(&path)),
                Err(e) => eprintln!("warning: failed to save the run record: {e}"),
            }
            if rec.status == RunStatus::Completed {
                let path = lock::lock_path(&plan.pipeline.file);
                match LockFile::from_record(&rec).write(&path) {
                    Ok(_) => eprintln!("lock: {}", display_rel(&path)),
                    Err(e) => eprintln!("warning: {e}"),
                }
            }
            for (label, r) in &rec.instances {
                if r.status.status == Status::Failed {
                    eprintln!(
                        "  {label} FAILED {}",
                        r.status.error.as_deref().unwrap_or("")
                    );
                    // A stage that printed nothing to stderr has no log file.
                    if let Some([_, err]) = r.logs.as_ref().filter(|[_, e]| Path::new(e).exists()) {
                        eprintln!("    log: {}", display_rel(Path::new(err)));
                    }
                }
            }
            Ok(match rec.status {
                RunStatus::Completed => EXIT_OK,
                RunStatus::Failed => EXIT_STAGE_FAILED,
                RunStatus::Interrupted => EXIT_INTERRUPTED,
            })
        }
        Cmd::Plan { p, json } => {
            let (plan, ctx) = prepared(&cli, p).await?;
            let remote = open_remote(&cli, &plan.pipeline.root, ctx.store.clone())?;
            let history: Box<dyn sched::History> = match remote {
                Some(r) => Box::new(crate::remote_cache::RemoteHistory::new(
                    &ctx.store,
                    crate::remote_cache::gate(r),
                )),
                None => Box::new(sched::CacheHistory::new(&ctx.store)),
            };
            let rows = sched::preview(&ctx, &RunOptions::default(), history.as_ref(), false);
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
            } else {
                // One buffered writer: stdout is line-buffered, a write per row costs more than
                // planning the row. A closed pipe (`| head`) ends the listing quietly.
                use std::io::Write as _;
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                let width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
                for r in &rows {
                    let written = if r.cached && r.remote {
                        writeln!(out, "cached  {:width$}  (remote)", r.label)
                    } else if r.cached {
                        writeln!(out, "cached  {:width$}", r.label)
                    } else {
                        writeln!(out, "run     {:width$}  {}", r.label, r.reason)
                    };
                    if written.is_err() {
                        return Ok(EXIT_OK);
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
            Ok(EXIT_OK)
        }
        Cmd::Lock { p } => {
            let (plan, ctx) = prepared(&cli, p).await?;
            let history = sched::CacheHistory::new(&ctx.store);
            let rows = sched::preview(&ctx, &RunOptions::default(), &history, true);
            let missing: Vec<&str> = rows
                .iter()
                .filter(|r| !r.cached)
                .map(|r| r.label.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(Fail {
                    code: EXIT_STAGE_FAILED,
                    msg: format!(
                        "error: {} instances are not in the cache ({}); run the pipeline first",
                        missing.len(),
                        missing.join(", ")
                    ),
                });
            }
            let path = lock::lock_path(&plan.pipeline.file);
            let lockfile = LockFile::from_rows(&plan, &ctx.images, &rows);
            lockfile
                .write(&path)
                .map_err(|e| Fail::invalid(format!("error: {e}")))?;
            println!("wrote {}", display_rel(&path));
            Ok(EXIT_OK)
        }
        Cmd::Status { p, check, json } => {
            let (plan, ctx) = prepared(&cli, p).await?;
            let path = lock::lock_path(&plan.pipeline.file);
            let lockfile = LockFile::read(&path).map_err(|e| Fail::invalid(format!("error: {e}\n  = help: `heddle run` writes it after a successful run; `heddle lock` writes it from the cache")))?;
            let rows = sched::preview(&ctx, &RunOptions::default(), &lockfile, false);
            let labels: BTreeSet<&str> = rows.iter().map(|r| r.label.as_str()).collect();
            let removed: Vec<&str> = lockfile
                .instances
                .iter()
                .map(|i| i.label.as_str())
                .filter(|l| !labels.contains(l))
                .collect();
            let changed = rows.iter().filter(|r| !r.cached).count();
            let held: Vec<_> =
                heddle_runner::host_pool::holders(&heddle_runner::host_pool::lock_dir())
                    .into_iter()
                    .filter(|h| plan.pipeline.host_pools.contains(&h.pool))
                    .collect();
            if *json {
                let held: Vec<_> = held
                    .iter()
                    .map(|h| serde_json::json!({"pool": h.pool, "unit": h.unit, "pid": h.pid, "run": h.run_id, "instance": h.instance, "since_unix": h.since_unix}))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"lock": path, "instances": rows, "removed": removed, "host_units_held": held})
                    )
                    .expect("json")
                );
            } else {
                for h in &held {
                    println!(
                        "held     {}#{} by pid {}, run {} ({}), since {}",
                        h.pool,
                        h.unit,
                        h.pid.map_or("?".into(), |p| p.to_string()),
                        h.run_id,
                        h.instance,
                        h.since_unix.map_or("?".into(), |t| format!("unix {t}")),
                    );
                }
                let width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
                for r in &rows {
                    if r.cached {
                        println!("same     {:width$}", r.label);
                    } else {
                        println!("changed  {:width$}  {}", r.label, r.reason);
                    }
                }
                for l in &removed {
                    println!("removed  {l}");
                }
                println!(
                    "{} instances against {}: {} as locked, {changed} changed, {} removed",
                    rows.len(),
                    display_rel(&path),
                    rows.len() - changed,
                    removed.len()
                );
            }
            Ok(if *check && (changed > 0 || !removed.is_empty()) {
                EXIT_STAGE_FAILED
            } else {
                EXIT_OK
            })
        }
        Cmd::Dag { p, format } => {
            let plan = load_plan(&cli, p)?;
            match format {
                DagFormat::Text => {
                    for inst in &plan.instances {
                        if inst.deps.is_empty() {
                            println!("{}", inst.label);
                        } else {
                            let deps: Vec<&str> = inst
                                .deps
                                .iter()
                                .map(|d| plan.instances[*d].label.as_str())
                                .collect();
                            println!("{} <- {}", inst.label, deps.join(", "));
                        }
                    }
                }
                DagFormat::Dot => {
                    println!("digraph \"{}\" {{", plan.pipeline.name);
                    println!("  rankdir=LR;");
                    for inst in &plan.instances {
                        println!(
                            "  n{} [label=\"{}\"];",
                            inst.id,
                            inst.label.replace('"', "\\\"")
                        );
                    }
                    for e in plan.graph.edge_indices() {
                        let (a, b) = plan.graph.edge_endpoints(e).expect("edge");
                        println!("  n{} -> n{};", a.index(), b.index());
                    }
                    println!("}}");
                }
            }
            Ok(EXIT_OK)
        }
        Cmd::Runs { json } => {
            let root = project_root(&cli);
            let ids = record::list(&root);
            let mut rows = Vec::new();
            for id in &ids {
                if let Ok(r) = record::load(&root, id) {
                    rows.push(r);
                }
            }
            if *json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|r| {
                        let (ran, cached, failed, skipped) = r.counts();
                        serde_json::json!({"run_id": r.run_id, "pipeline": r.pipeline, "status": r.status, "duration_ms": r.duration_ms, "ran": ran, "cached": cached, "failed": failed, "skipped": skipped})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v).expect("json"));
            } else if rows.is_empty() {
                println!(
                    "no runs recorded under {}",
                    display_rel(&record::runs_dir(&root))
                );
            } else {
                for r in &rows {
                    let (ran, cached, failed, skipped) = r.counts();
                    println!("{}  {:<11} {:<16} {:>7}  ran {ran} cached {cached} failed {failed} skipped {skipped}", r.run_id, format!("{:?}", r.status).to_lowercase(), r.pipeline, secs(r.duration_ms));
                }
            }
            Ok(EXIT_OK)
        }
        Cmd::Show { run, json } => {
            let root = project_root(&cli);
            let r = record::load(&root, run).map_err(|e| Fail::invalid(format!("error: {e}")))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r).expect("json"));
                return Ok(EXIT_OK);
            }
            let (ran, cached, failed, skipped) = r.counts();
            println!(
                "run {}  pipeline {}  {:?}  {}",
                r.run_id,
                r.pipeline,
                r.status,
                secs(r.duration_ms)
            );
            println!("ran {ran}, cached {cached}, failed {failed}, skipped {skipped}");
            let width = r.instances.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
            for (label, i) in &r.instances {
                let state = match (i.status.status, i.cached) {
                    (Status::Ok, true) => "cached".to_string(),
                    (Status::Ok, false) => format!("ok {}", secs(i.duration_ms)),
                    (Status::Failed, _) => {
                        format!("FAILED {}", i.status.error.as_deref().unwrap_or(""))
                    }
                    (Status::Skipped, _) => format!(
                        "skipped ({})",
                        i.status
                            .cause
                            .as_ref()
                            .map(|c| c.label.as_str())
                            .unwrap_or("")
                    ),
                };
                let why = if i.cached || i.status.status == Status::Skipped {
                    String::new()
                } else {
                    format!("  [{}]", i.reason)
                };
                println!("  {label:width$}  {state}{why}");
            }
            Ok(EXIT_OK)
        }
        Cmd::Cache {
            cmd: CacheCmd::Push { run, lock },
        } => cache_push(&cli, run.as_deref(), lock.as_deref()).await,
        Cmd::Cache { cmd } => cache_cmd(&cli, cmd),
        Cmd::Report { run, output } => {
            let root = project_root(&cli);
            let rec = record::load(&root, run).map_err(|e| Fail::invalid(format!("error: {e}")))?;
            let store = open_store(&cli)?;
            logbook::write_report(&store, &root, &rec, output)
        }
        Cmd::Logbook { cmd } => {
            let root = project_root(&cli);
            let store = open_store(&cli)?;
            match cmd {
                LogbookCmd::New { run, output, title } => {
                    let rec = record::load(&root, run)
                        .map_err(|e| Fail::invalid(format!("error: {e}")))?;
                    logbook::new_entry(&store, &root, &rec, output, title.as_deref())
                }
                LogbookCmd::Verify {
                    entry,
                    fresh,
                    runs,
                    rtol,
                    atol,
                    progress,
                } => {
                    let rr = logbook::Rerun {
                        root: &root,
                        store,
                        progress: *progress,
                    };
                    let opts = logbook::VerifyOptions {
                        fresh: *fresh,
                        runs: *runs,
                        tol: (rtol.is_some() || atol.is_some()).then(|| {
                            heddle_report::compare::Tolerance {
                                rtol: rtol.unwrap_or(0.0),
                                atol: atol.unwrap_or(0.0),
                            }
                        }),
                    };
                    logbook::verify(entry, &rr, &opts).await
                }
                LogbookCmd::Refresh { entry, progress } => {
                    let rr = logbook::Rerun {
                        root: &root,
                        store,
                        progress: *progress,
                    };
                    logbook::refresh(entry, &rr).await
                }
            }
        }
        Cmd::Gc {
            containers,
            docker_host,
            all,
        } => {
            let all = *all;
            if !containers {
                return Err(Fail::invalid("error: say what to collect: `heddle gc --containers` (for the cache: `heddle cache gc`)"));
            }
            let engine = heddle_containers::Engine::connect(docker_host.as_deref())
                .await
                .map_err(|e| Fail::invalid(format!("error: {e}")))?;
            // A container whose heddle is still running on this host belongs to a live run.
            let me = sched::hostname();
            let n = engine
                .remove_labelled_unless(None, |labels| {
                    !all && labels.get("heddle.host") == Some(&me)
                        && labels
                            .get("heddle.pid")
                            .and_then(|p| p.parse::<u32>().ok())
                            .is_some_and(pid_alive)
                })
                .await
                .map_err(|e| Fail::invalid(format!("error: {e}")))?;
            println!(
                "removed {n} heddle container{}",
                if n == 1 { "" } else { "s" }
            );
            Ok(EXIT_OK)
        }
    }
}

/// Load, plan and prepare without running or provisioning (plan, status, lock): never pulls,
/// and reports images it cannot resolve per instance.
async fn prepared(cli: &Cli, p: &PipelineArgs) -> Result<(Arc<Plan>, sched::Context), Fail> {
    let plan = Arc::new(load_plan(cli, p)?);
    let store = open_store(cli)?;
    let stats = stat_cache(&plan);
    let opts = PrepareOptions {
        provision_envs: false,
        resolve_images: true,
        strict_images: false,
        env_store: None,
    };
    let ctx = prepare(plan.clone(), store, stats.clone(), opts, &|_| {}).await?;
    // Hashes learnt while planning spare the next command the reads.
    let _ = stats.save();
    Ok((plan, ctx))
}

/// Load, plan and run a pipeline with `--set` overrides (for the logbook's reruns).
pub async fn rerun(
    file: &Path,
    sets: &[(String, String)],
    store: Arc<Store>,
    env_store: Option<Arc<Store>>,
    opts: RunOptions,
    progress: ProgressMode,
) -> Result<record::RunRecord, Fail> {
    let pipeline = model::load(
        file,
        &LoadOptions {
            overrides: sets.to_vec(),
            root: None,
            stage_lib: Some(store.root().join("stage-lib")),
        },
    )?;
    let plan = Arc::new(plan::build(Arc::new(pipeline)).map_err(|d| Fail::invalid(d.to_string()))?);
    execute(plan, store, env_store, opts, progress).await
}

/// Prepare and walk a plan, rendering progress; returns the run record (not yet saved).
async fn execute(
    plan: Arc<Plan>,
    store: Arc<Store>,
    env_store: Option<Arc<Store>>,
    opts: RunOptions,
    progress: ProgressMode,
) -> Result<record::RunRecord, Fail> {
    let stats = stat_cache(&plan);
    let quiet = progress == ProgressMode::Quiet;
    let log = move |m: &str| {
        if !quiet {
            eprintln!("note    {m}");
        }
    };
    let _out_lock = lock_out(&plan, &opts.run_id, &log).await?;
    let ctx = prepare(
        plan.clone(),
        store,
        stats,
        PrepareOptions {
            provision_envs: true,
            resolve_images: true,
            strict_images: true,
            env_store,
        },
        &log,
    )
    .await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let reporter = tokio::spawn(report::report(progress, plan.instances.len(), rx));
    let rec = sched::run(ctx, opts, tx).await;
    let _ = reporter.await;
    Ok(rec)
}

/// Whether a process with this pid exists (and is not a zombie) on this host.
fn pid_alive(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z'),
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Without /proc, assume alive: sparing a leftover beats killing a live run.
        let _ = pid;
        true
    }
}

fn project_root(cli: &Cli) -> PathBuf {
    if let Some(r) = &cli.root {
        return r.clone();
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut dir = Some(cwd.as_path());
    while let Some(d) = dir {
        if d.join(".heddle").is_dir() {
            return d.to_path_buf();
        }
        dir = d.parent();
    }
    cwd
}

/// Hold the pipeline's `out/` for this run ([`heddle_runner::out_lock`]), waiting for a run of
/// the same pipeline in another process to finish first.
async fn lock_out(plan: &Plan, run_id: &str, log: &dyn Fn(&str)) -> Result<OutLock, Fail> {
    let root = plan.pipeline.root.clone();
    let name = plan.pipeline.name.clone();
    let lock_err = |e: heddle_runner::out_lock::OutLockError| {
        Fail::invalid(format!("error: {}", heddle_cache::error_chain(&e)))
    };
    match OutLock::try_acquire(&root, &name, run_id).map_err(lock_err)? {
        Ok(lock) => Ok(lock),
        Err(holder) => {
            log(&format!(
                "waiting for another run of `{name}` to finish with {} (pid {}, run {})",
                display_rel(&sched::output_dir(plan, "")),
                holder.pid.map_or("?".into(), |p| p.to_string()),
                holder.run_id.as_deref().unwrap_or("?"),
            ));
            let run_id = run_id.to_string();
            tokio::task::spawn_blocking(move || OutLock::acquire(&root, &name, &run_id))
                .await
                .map_err(|e| Fail::invalid(format!("error: {e}")))?
                .map_err(lock_err)
        }
    }
}

fn display_rel(p: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    p.strip_prefix(&cwd).unwrap_or(p).display().to_string()
}

fn cache_cmd(cli: &Cli, cmd: &CacheCmd) -> Result<i32, Fail> {
    let store = open_store(cli)?;
    let cache_err = |e: heddle_cache::CacheError| Fail {
        code: EXIT_INVALID,
        msg: format!("error: {}", heddle_cache::error_chain(&e)),
    };
    match cmd {
        CacheCmd::Du => {
            let du = store.du().map_err(cache_err)?;
            println!(
                "{}: {} in {} blobs, {} actions",
                store.root().display(),
                human(du.blob_bytes),
                du.blob_count,
                du.action_count
            );
            for (fam, u) in &du.families {
                println!(
                    "  {fam:<40} {:>10}  {} actions",
                    human(u.output_bytes),
                    u.actions
                );
            }
            Ok(EXIT_OK)
        }
        CacheCmd::Verify => {
            let r = store.verify().map_err(cache_err)?;
            println!(
                "checked {} blobs ({}), {} actions",
                r.blobs_checked,
                human(r.bytes_checked),
                r.actions_checked
            );
            if !r.tmp_removed.is_empty() {
                println!("removed {} leftover temp files", r.tmp_removed.len());
            }
            for b in &r.bad {
                println!("BAD {b:?}");
            }
            if r.is_clean() {
                println!("cache is clean");
                Ok(EXIT_OK)
            } else {
                println!(
                    "{} bad entries (removed; they will be recomputed)",
                    r.bad.len()
                );
                Ok(EXIT_STAGE_FAILED)
            }
        }
        CacheCmd::Push { .. } => unreachable!("dispatched before cache_cmd: it is async"),
        CacheCmd::Gc {
            max_size,
            keep_runs,
        } => {
            let max = match max_size {
                Some(s) => Some(
                    heddle_containers::parse_size(s)
                        .map_err(|e| Fail::invalid(format!("error: --max-size {s}: {e}")))?,
                ),
                None => None,
            };
            let root = project_root(cli);
            let mut keep: HashSet<Digest> = HashSet::new();
            let ids = record::list(&root);
            for id in ids.iter().rev().take(*keep_runs) {
                if let Ok(r) = record::load(&root, id) {
                    for (_, i) in &r.instances {
                        if let Some(k) = i.cache_key.as_deref().and_then(|k| k.parse().ok()) {
                            keep.insert(k);
                        }
                    }
                }
            }
            for k in lock_keys(&root) {
                keep.insert(k);
            }
            let r = store.gc(&keep, max).map_err(cache_err)?;
            println!("kept {} referenced actions; evicted {} actions, removed {} blobs, freed {}; {} remain", keep.len(), r.evicted.len(), r.blobs_removed, human(r.bytes_freed), human(r.bytes_remaining));
            Ok(EXIT_OK)
        }
    }
}

/// The shared cache this command uses, if one is configured; a bad configuration is exit 2.
fn open_remote(
    cli: &Cli,
    project_root: &Path,
    store: Arc<Store>,
) -> Result<Option<Arc<dyn heddle_runner::shared_cache::SharedCache>>, Fail> {
    let flags = crate::remote_cache::RemoteFlags {
        url: cli.remote_cache.clone(),
        mode: cli.remote_cache_mode.clone(),
    };
    crate::remote_cache::open(project_root, &flags, store)
        .map_err(|e| Fail::invalid(format!("error: {}", heddle_cache::error_chain(&e))))
}

/// `heddle cache push [RUN | --lock FILE]`.
async fn cache_push(cli: &Cli, run: Option<&str>, lock: Option<&Path>) -> Result<i32, Fail> {
    let store = open_store(cli)?;
    let root = project_root(cli);
    let Some(remote) = open_remote(cli, &root, store.clone())? else {
        return Err(Fail::invalid(
            "error: no remote cache configured: pass --remote-cache URL, set HEDDLE_REMOTE_CACHE, or [cache] remote in .heddle/config.toml",
        ));
    };
    let keys: Vec<Digest> = match lock {
        Some(path) => LockFile::read(path)
            .map_err(|e| Fail::invalid(format!("error: {}", heddle_cache::error_chain(&e))))?
            .instances
            .iter()
            .filter_map(|i| i.cache_key.parse().ok())
            .collect(),
        None => record::load(&root, run.unwrap_or("last"))
            .map_err(|e| Fail::invalid(format!("error: {e}")))?
            .instances
            .iter()
            .filter_map(|(_, i)| i.cache_key.as_deref().and_then(|k| k.parse().ok()))
            .collect(),
    };
    let summary = crate::remote_cache::push_keys(remote.as_ref(), &store, &keys)
        .await
        .map_err(|e| Fail {
            code: if e.unavailable {
                EXIT_INVALID
            } else {
                EXIT_STAGE_FAILED
            },
            msg: format!(
                "error: failed to push to {}: {}",
                remote.describe(),
                e.message
            ),
        })?;
    println!("pushed {} actions to {}", summary.pushed, remote.describe());
    if !summary.missing_locally.is_empty() {
        println!(
            "{} referenced actions are not in the local cache (not pushed)",
            summary.missing_locally.len()
        );
    }
    Ok(EXIT_OK)
}

/// Cache keys named by lock files under `<root>/pipelines/*.lock`.
fn lock_keys(root: &Path) -> Vec<Digest> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root.join("pipelines"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "lock") {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                for line in text.lines() {
                    if let Some(rest) = line.trim().strip_prefix("cache_key = \"") {
                        if let Some(k) = rest.strip_suffix('"').and_then(|k| k.parse().ok()) {
                            out.push(k);
                        }
                    }
                }
            }
        }
    }
    out
}

fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

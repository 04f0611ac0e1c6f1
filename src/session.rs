//! What every command shares: where the cache and the project are, and the four steps from a
//! pipeline file to a run record (load, prepare, execute, rerun). Commands call these and
//! never each other, so `run`, `plan`, `status` and the logbook's reruns take one path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_cache::{StatCache, Store};
use heddle_runner::hosts::{self, Hosts};
use heddle_runner::model::{self, LoadOptions};
use heddle_runner::out_lock::OutLock;
use heddle_runner::outputs::output_dir;
use heddle_runner::plan::{self, Plan};
use heddle_runner::prepare::Context;
use heddle_runner::prepare::{prepare, PrepareOptions};
use heddle_runner::record::RunRecord;
use heddle_runner::run_options::RunOptions;

use heddle_runner::shared_cache::SharedCache;

use crate::dfc::Route;
use crate::error::Error;
use crate::progress::{self, ProgressMode};
use crate::remote_cache::RemoteFlags;

/// The pipeline a command works on, as given on its command line.
#[derive(clap::Args, Debug, Clone)]
pub struct PipelineArgs {
    /// The pipeline file (default: ./heddle.toml, or the only file in ./pipelines/).
    pipeline: Option<PathBuf>,
    /// Override a param: --set name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE",
          add = clap_complete::engine::ArgValueCompleter::new(crate::completion::params))]
    set: Vec<String>,
}

/// The global options, resolved once: the cache directory and the project root.
pub struct Session {
    cache_dir: PathBuf,
    root: Option<PathBuf>,
    remote: RemoteFlags,
}

impl Session {
    pub fn new(cache_dir: Option<PathBuf>, root: Option<PathBuf>, remote: RemoteFlags) -> Session {
        Session {
            cache_dir: cache_dir.unwrap_or_else(default_cache_dir),
            root,
            remote,
        }
    }

    /// The shared cache configured for `project_root` (flags, environment, config files), if
    /// any. A configuration that cannot work is an error; a remote that is down is not (it
    /// shows on first use, and the run goes on locally).
    pub fn open_remote(
        &self,
        project_root: &Path,
        store: Arc<Store>,
    ) -> Result<Option<Arc<dyn SharedCache>>, Error> {
        Ok(crate::remote_cache::open(
            project_root,
            &self.remote,
            store,
        )?)
    }

    /// The shared cache's address and writability for `project_root`, if one is configured.
    pub fn remote_address(&self, project_root: &Path) -> Result<Option<(String, bool)>, Error> {
        Ok(crate::remote_setup::address(project_root, &self.remote)?)
    }

    /// The remote cache itself (not behind the scheduler's interface), for commands that
    /// inspect it (`cache verify --remote`).
    pub fn open_remote_cache(
        &self,
        project_root: &Path,
    ) -> Result<Option<heddle_remote::RemoteCache>, Error> {
        Ok(crate::remote_setup::open_cache(project_root, &self.remote)?)
    }

    /// Where `uses` finds heddle's own stage library, extracted from the binary.
    pub fn stage_lib(&self) -> PathBuf {
        self.cache_dir.join("stage-lib")
    }

    /// `--root`, else the nearest folder at or above the working directory with `.heddle/`,
    /// else the working directory.
    pub fn project_root(&self) -> PathBuf {
        if let Some(r) = &self.root {
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

    pub fn open_store(&self) -> Result<Arc<Store>, Error> {
        Store::open(&self.cache_dir)
            .map(Arc::new)
            .map_err(|source| Error::OpenCache {
                dir: self.cache_dir.clone(),
                source,
            })
    }

    /// Load and plan the pipeline the arguments name.
    pub fn load_plan(&self, p: &PipelineArgs) -> Result<Plan, Error> {
        Ok(self.load_routed(p, &[])?.0)
    }

    /// Load the pipeline with its DFC route applied (`[dfc]` in the config files, see
    /// [`crate::dfc`]) and plan it with only the stages `only` names and what they need (all
    /// when empty). Returns the route too: `run` builds route (b)'s image before it starts.
    pub fn load_routed(&self, p: &PipelineArgs, only: &[String]) -> Result<(Plan, Route), Error> {
        let file = find_pipeline(&p.pipeline)?;
        let root = match &self.root {
            Some(r) => r.clone(),
            None => model::find_root(&file),
        };
        let route = crate::dfc::route_for(&root)?;
        // The route's values first, as if set with --set; the user's own --set after them wins.
        // Finding the declared params parses the file a second time (3 % of a 100k no-op):
        // only a route has values to set.
        let declared = match route {
            Route::Unset => Vec::new(),
            _ => declared_params(&file),
        };
        let mut overrides = route.overrides(&declared);
        for s in &p.set {
            let (k, v) = s
                .split_once('=')
                .ok_or_else(|| Error::Usage(format!("--set {s}: expected NAME=VALUE")))?;
            overrides.push((k.trim().to_string(), v.to_string()));
        }
        let mut pipeline = model::load(
            &file,
            &LoadOptions {
                overrides,
                root: self.root.clone(),
                stage_lib: Some(self.stage_lib()),
            },
        )?;
        for w in &pipeline.warnings {
            // Multi-line (the quoted source line and its caret), like an error.
            eprintln!("{}", crate::printable::printable(&w.warning_text()));
        }
        route.apply(&mut pipeline)?;
        crate::commands::select::keep_only(&mut pipeline, only)?;
        Ok((plan::build(Arc::new(pipeline))?, route))
    }

    /// Load, plan and prepare without running or provisioning (plan, status, lock): never
    /// pulls, and reports images it cannot resolve per instance.
    pub async fn prepared(&self, p: &PipelineArgs) -> Result<(Arc<Plan>, Context), Error> {
        let plan = Arc::new(self.load_plan(p)?);
        let store = self.open_store()?;
        let stats = stat_cache(&plan);
        let opts = PrepareOptions {
            provision_envs: false,
            resolve_images: true,
            strict_images: false,
            hosts: load_hosts(&plan.pipeline.root)?,
            env_store: None,
        };
        let ctx = prepare(plan.clone(), store, stats.clone(), opts, &|_| {}).await?;
        // Hashes learnt while planning spare the next command the reads.
        let _ = stats.save();
        Ok((plan, ctx))
    }
}

/// The params a pipeline file declares (its `[params]` keys), read before it is loaded so a DFC
/// route sets only params the pipeline has. A file that does not parse declares none here: the
/// load that follows reports it with its position.
fn declared_params(file: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    match table.get("params") {
        Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The remote engines the user and the project configured (`hosts.toml`, see
/// [`heddle_runner::hosts`]); a file with a mistake stops the command (exit 2). The project's
/// file is checked but used only once the user trusts the project ([`crate::trust`]): its
/// engines would get the stages' inputs and the user's TLS files or ssh keys.
pub fn load_hosts(project_root: &Path) -> Result<Hosts, Error> {
    let env = |k: &str| std::env::var(k).ok();
    let files = hosts::config_files(project_root, &env);
    let all = hosts::load(&files)?;
    let project_file = project_root.join(".heddle").join("hosts.toml");
    if !project_file.is_file() {
        return Ok(all);
    }
    let trust = crate::trust::check(project_root, &env);
    if trust.is_trusted() {
        return Ok(all);
    }
    crate::trust::warn_ignored(project_root, &project_file, "the engines it names", trust);
    let own: Vec<_> = files.into_iter().filter(|f| *f != project_file).collect();
    Ok(hosts::load(&own)?)
}

/// `$XDG_CACHE_HOME/heddle`, `%LOCALAPPDATA%\heddle` on Windows, else `~/.cache/heddle`.
fn default_cache_dir() -> PathBuf {
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

/// The pipeline given, else `./heddle.toml`, else the only `./pipelines/*.toml`.
fn find_pipeline(given: &Option<PathBuf>) -> Result<PathBuf, Error> {
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
        0 => Err(Error::Usage(
            "no pipeline given, and neither ./heddle.toml nor ./pipelines/*.toml exists".into(),
        )),
        _ => {
            let mut names: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
            names.sort();
            Err(Error::Usage(format!(
                "several pipelines; name one of: {}",
                names.join(", ")
            )))
        }
    }
}

fn stat_cache(plan: &Plan) -> Arc<StatCache> {
    Arc::new(StatCache::load(
        &plan.pipeline.root.join(".heddle").join("stat-cache"),
    ))
}

/// Load a pipeline with `--set` overrides as the logbook's reruns do (the stage library of
/// `store`), without running it.
pub fn load_for_rerun(
    file: &Path,
    sets: &[(String, String)],
    store: &Store,
) -> Result<model::Pipeline, Error> {
    Ok(model::load(
        file,
        &LoadOptions {
            overrides: sets.to_vec(),
            root: None,
            stage_lib: Some(store.root().join("stage-lib")),
        },
    )?)
}

/// Load, plan and run a pipeline with `--set` overrides (for the logbook's reruns).
pub async fn rerun(
    file: &Path,
    sets: &[(String, String)],
    store: Arc<Store>,
    env_store: Option<Arc<Store>>,
    opts: RunOptions,
    progress: ProgressMode,
) -> Result<RunRecord, Error> {
    let pipeline = load_for_rerun(file, sets, &store)?;
    let plan = Arc::new(plan::build(Arc::new(pipeline))?);
    execute(plan, store, env_store, opts, progress).await
}

/// Prepare and walk a plan, rendering progress; returns the run record (not yet saved).
pub async fn execute(
    plan: Arc<Plan>,
    store: Arc<Store>,
    env_store: Option<Arc<Store>>,
    opts: RunOptions,
    progress: ProgressMode,
) -> Result<RunRecord, Error> {
    let stats = stat_cache(&plan);
    let quiet = progress == ProgressMode::Quiet;
    let log = move |m: &str| {
        if !quiet {
            eprintln!("note    {}", crate::printable::printable(m));
        }
    };
    let hosts = load_hosts(&plan.pipeline.root)?;
    let _out_lock = lock_out(&plan, &opts.run_id, &log).await?;
    let ctx = prepare(
        plan.clone(),
        store,
        stats,
        PrepareOptions {
            provision_envs: true,
            resolve_images: true,
            strict_images: true,
            hosts,
            env_store,
        },
        &log,
    )
    .await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let reporter = tokio::spawn(progress::display(progress, plan.instances.len(), rx));
    let rec = heddle_runner::run(ctx, opts, tx).await;
    let _ = reporter.await;
    Ok(rec)
}

/// Hold the pipeline's `out/` for this run ([`heddle_runner::out_lock`]), waiting for a run of
/// the same pipeline in another process to finish first.
async fn lock_out(plan: &Plan, run_id: &str, log: &dyn Fn(&str)) -> Result<OutLock, Error> {
    let root = plan.pipeline.root.clone();
    let name = plan.pipeline.name.clone();
    match OutLock::try_acquire(&root, &name, run_id)? {
        Ok(lock) => Ok(lock),
        Err(holder) => {
            log(&format!(
                "waiting for another run of `{name}` to finish with {} (pid {}, run {})",
                display_rel(&output_dir(plan, "")),
                holder.pid.map_or("?".into(), |p| p.to_string()),
                holder.run_id.as_deref().unwrap_or("?"),
            ));
            let run_id = run_id.to_string();
            let lock = tokio::task::spawn_blocking(move || OutLock::acquire(&root, &name, &run_id))
                .await
                .map_err(Error::Task)??;
            Ok(lock)
        }
    }
}

/// A path relative to the working directory when it is under it (shorter to read and copy).
pub fn display_rel(p: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    p.strip_prefix(&cwd).unwrap_or(p).display().to_string()
}

/// As many jobs as the machine has cores.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

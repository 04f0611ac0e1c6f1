//! The command line: clap's definitions of every command and its arguments, and a dispatch
//! that hands each to its module in [`crate::commands`]. Holds no engine logic.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::commands::{self, cache, lock, logbook, runs, stages};
use crate::error::{self, Error, EXIT_INVALID, EXIT_OK};
use crate::session::Session;
use crate::style::{self, ColorChoice};

#[derive(Parser, Debug)]
#[command(
    name = "heddle",
    version,
    about = "Declarative TOML pipelines, content-addressed and reproducible"
)]
pub struct Cli {
    /// Cache directory (default: $XDG_CACHE_HOME/heddle or ~/.cache/heddle).
    #[arg(long, global = true, env = "HEDDLE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Project root (default: the nearest folder above the pipeline with stages/, .heddle/ or .git).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Colour the statuses (ok, cached, FAILED): auto is on a terminal unless NO_COLOR is set.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// Shared cache to read through and write back (s3://bucket/prefix, webdav+http://host/path,
    /// file:///dir); also `HEDDLE_REMOTE_CACHE`, or `[cache] remote` in .heddle/config.toml or
    /// ~/.config/heddle/config.toml.
    #[arg(long, global = true, value_name = "URL")]
    remote_cache: Option<String>,
    /// read (the default): only fetch from the shared cache; readwrite: also upload what runs
    /// here, signed with this machine's key (`heddle cache keygen`).
    #[arg(long, global = true, value_name = "MODE")]
    remote_cache_mode: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a pipeline: every instance whose inputs changed, the rest from the cache.
    Run(commands::run::RunArgs),
    /// Run one action a cluster job was given (what `heddle run --cluster` submits).
    Worker(commands::cluster::WorkerArgs),
    /// The stage definitions `uses` can name: the project's `stages/`, then heddle's library.
    Stages {
        #[command(subcommand)]
        cmd: stages::StagesCmd,
    },
    /// Scaffold a project in DIR: `.heddle/`, `.gitignore`, `pipelines/EXAMPLE.toml`.
    Init(stages::InitArgs),
    /// Say, per instance, whether it is cached or why it must run.
    Plan(commands::plan::PlanArgs),
    /// Write the lock file from the cache (every instance must be cached).
    Lock(lock::LockArgs),
    /// Compare the pipeline as it stands with its lock file: what changed and why.
    Status(lock::StatusArgs),
    /// Print the instance graph.
    Dag(commands::dag::DagArgs),
    /// List recorded runs.
    Runs(runs::RunsArgs),
    /// Show one run (an id, a unique prefix, or `last`).
    Show(runs::ShowArgs),
    /// Compare two runs (default: the last two of a pipeline): params, changed keys and why,
    /// every report number with its delta.
    Diff(commands::diff::DiffArgs),
    /// Inspect and maintain the cache.
    Cache {
        #[command(subcommand)]
        cmd: cache::CacheCmd,
    },
    /// Write a logbook entry from a run, verify an entry by rerunning it, or refresh its blocks.
    Logbook {
        #[command(subcommand)]
        cmd: logbook::LogbookCmd,
    },
    /// Render a run as one self-contained HTML page.
    Report(commands::report::ReportArgs),
    /// Let this project's .heddle/config.toml and .heddle/hosts.toml, as they are now, choose
    /// the remote cache and the engines (and so where your credentials go).
    Trust(commands::trust::TrustArgs),
    /// Remove containers a crashed run left behind.
    Gc(commands::gc::GcArgs),
    /// Print a shell completion script: `heddle completions bash > /etc/bash_completion.d/heddle`.
    Completions {
        #[arg(value_enum)]
        shell: commands::shell::Shell,
    },
    /// Print the man page (roff): `heddle man > heddle.1`.
    Man,
    /// Print the JSON Schema of a pipeline file or a stage.toml (editor completion):
    /// `heddle schema pipeline > schemas/pipeline.schema.json`.
    Schema {
        #[arg(value_enum)]
        file: commands::schema::SchemaArg,
    },
}

/// Parse the command line, run the command, print its error if any; returns the exit code.
pub fn main() -> i32 {
    // `COMPLETE=bash heddle`: print the shell's hook, or answer it, and exit.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command).complete();
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
    style::init(cli.color);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            // An error quotes the user's values and paths, and a stage's or a server's text.
            eprintln!("{}", crate::printable::printable(&error::render(&e)));
            e.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> Result<i32, Error> {
    let remote = crate::remote_cache::RemoteFlags {
        url: cli.remote_cache.clone(),
        mode: cli.remote_cache_mode.clone(),
    };
    let session = Session::new(cli.cache_dir, cli.root, remote);
    let s = &session;
    match &cli.cmd {
        Cmd::Run(a) => commands::run::run(s, a).await,
        Cmd::Worker(a) => commands::cluster::worker(s, a).await,
        Cmd::Stages { cmd } => stages::stages(s, cmd),
        Cmd::Init(a) => stages::init(a),
        Cmd::Plan(a) => commands::plan::plan(s, a).await,
        Cmd::Lock(a) => lock::lock(s, a).await,
        Cmd::Status(a) => lock::status(s, a).await,
        Cmd::Dag(a) => commands::dag::dag(s, a),
        Cmd::Runs(a) => runs::runs(s, a),
        Cmd::Show(a) => runs::show(s, a),
        Cmd::Diff(a) => commands::diff::diff(s, a),
        Cmd::Cache { cmd } => cache::cache(s, cmd).await,
        Cmd::Logbook { cmd } => logbook::logbook(s, cmd).await,
        Cmd::Report(a) => commands::report::report(s, a),
        Cmd::Gc(a) => commands::gc::gc(a).await,
        Cmd::Trust(a) => commands::trust::trust(s, a),
        Cmd::Completions { shell } => commands::shell::completions(*shell, Cli::command()),
        Cmd::Man => commands::shell::man(Cli::command()),
        Cmd::Schema { file } => commands::schema::schema(*file),
    }
}

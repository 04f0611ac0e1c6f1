//! `heddle run --cluster NAME` and `heddle worker`: the glue between the command line and
//! `heddle_runner::cluster` (the named cluster from hosts.toml, the shared cache it needs, the
//! worker's signals and exit code).

use std::sync::Arc;

use heddle_runner::cluster::{Driver, Worker, EXIT_INFRA};
use heddle_runner::exec::Cancel;
use heddle_runner::plan::Plan;

use crate::error::Error;
use crate::session::{load_hosts, Session};

/// The cluster a run uses: `--cluster NAME`, else the pipeline's `[pipeline] cluster`; with
/// what names it in errors (`--cluster NAME`, or `cluster = "NAME" (FILE:LINE:COL)`).
pub fn chosen(flag: Option<&str>, plan: &Plan) -> Option<(String, String)> {
    match (flag, &plan.pipeline.cluster) {
        (Some(name), _) => Some((name.to_string(), format!("--cluster {name}"))),
        (None, Some(c)) => Some((
            c.name.clone(),
            format!("cluster = \"{}\" ({})", c.name, c.at),
        )),
        (None, None) => None,
    }
}

/// The run's cluster driver, or why there can be none: an unknown cluster, or no shared cache
/// to carry inputs and results (exit 2, saying how to set one). `origin` says what chose the
/// cluster ([`chosen`]).
pub fn driver(
    s: &Session,
    plan: &Plan,
    (name, origin): (&str, &str),
    store: Arc<heddle_cache::Store>,
    run_id: &str,
) -> Result<Arc<Driver>, Error> {
    let root = &plan.pipeline.root;
    let hosts = load_hosts(root)?;
    let Some(cluster) = hosts.clusters.get(name).cloned() else {
        let known: Vec<&str> = hosts.clusters.keys().map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "{origin}: no [clusters.{name}] in hosts.toml ({})",
            if known.is_empty() {
                "no cluster is configured; see docs/scale-out.md".to_string()
            } else {
                format!("clusters: {}", known.join(", "))
            }
        )));
    };
    let no_cache = || {
        Error::Usage(format!(
            "{origin} needs a shared cache the nodes can reach, to carry inputs and \
             results: set HEDDLE_REMOTE_CACHE (or --remote-cache, or [cache] remote in \
             .heddle/config.toml) to s3://BUCKET/PREFIX, webdav+https://HOST/PATH, \
             grpc://HOST:PORT or file:///SHARED/DIR"
        ))
    };
    let Some((url, writable)) = s.remote_address(root)? else {
        return Err(no_cache());
    };
    if !writable {
        return Err(Error::Usage(format!(
            "{origin}: the shared cache {url} is read-only (--remote-cache-mode read); \
             the driver must upload each action's inputs"
        )));
    }
    let Some(shared) = s.open_remote(root, store.clone())? else {
        return Err(no_cache());
    };
    // The driver speaks to SLURM through its client commands; without them every instance
    // would fail one by one.
    let slurm = cluster.kind == heddle_runner::hosts::ClusterKind::Slurm;
    let client = !slurm
        || std::process::Command::new("sbatch")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !client {
        return Err(Error::Usage(format!(
            "{origin}: `sbatch` does not run here; heddle submits through SLURM's client \
             commands (sbatch, squeue, scancel), so run it where they are (a login node) or \
             install them (Debian: slurm-client)"
        )));
    }
    Ok(Arc::new(Driver::new(
        cluster,
        shared,
        store,
        &url,
        run_id,
        Arc::new(|m| eprintln!("{m}")),
    )))
}

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// The action's cache key (its description is in the shared cache).
    #[arg(long, value_name = "KEY")]
    action: String,
    /// Names this attempt (`slurm:CLUSTER:JOBID`); the outcome is stored under it.
    #[arg(long)]
    tag: String,
}

/// `heddle worker`: run one action a cluster job was given. The exit code is the stage's, or
/// 75 when the node could not do its part.
pub async fn worker(s: &Session, a: &WorkerArgs) -> Result<i32, Error> {
    let key = a
        .action
        .parse()
        .map_err(|_| Error::Usage(format!("--action {}: not a sha256 key", a.action)))?;
    let infra = |m: String| {
        eprintln!("heddle worker: {m}");
        Ok(EXIT_INFRA)
    };
    let store = match s.open_store() {
        Ok(st) => st,
        Err(e) => return infra(crate::error::render(&e)),
    };
    let here = std::env::current_dir().unwrap_or_default();
    let shared = match s.open_remote(&here, store.clone()) {
        Ok(Some(sh)) => sh,
        Ok(None) => return infra("no shared cache: pass --remote-cache URL".into()),
        Err(e) => return infra(crate::error::render(&e)),
    };
    let cancel = Cancel::default();
    stop_on_signals(&cancel);
    let worker = Worker {
        store,
        shared,
        log: Box::new(|m| eprintln!("{m}")),
    };
    Ok(worker.run(key, &a.tag, cancel).await)
}

/// SIGTERM (scancel, the job's time limit) and SIGINT stop the stage gracefully; a second one
/// kills it.
fn stop_on_signals(cancel: &Cancel) {
    let cancel = cancel.clone();
    tokio::spawn(async move {
        let mut n = 0;
        #[cfg(unix)]
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        loop {
            #[cfg(unix)]
            {
                let got = async {
                    match term.as_mut() {
                        Some(t) => {
                            t.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = got => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            n += 1;
            if n == 1 {
                cancel.graceful.cancel();
            } else {
                cancel.force.cancel();
                break;
            }
        }
    });
}

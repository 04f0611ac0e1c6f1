//! `heddle gc --containers`: remove the containers a crashed run left behind, on the default
//! engine and on every engine `hosts.toml` configures, sparing those of runs still going on
//! this host.

use std::collections::HashSet;

use heddle_containers::{Engine, TlsFiles};

use crate::error::{render, Error, EXIT_INVALID, EXIT_OK};
use crate::printable::{printable, say};

#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Remove every container labelled heddle.managed=true, on the default engine and on each
    /// engine hosts.toml configures.
    #[arg(long)]
    containers: bool,
    /// Docker host (default: DOCKER_HOST or the local socket).
    #[arg(long)]
    docker_host: Option<String>,
    /// Also remove containers of heddle runs that are still going.
    #[arg(long)]
    all: bool,
}

/// One engine to clean: what to call it in the output, its address and TLS files.
struct Target {
    name: String,
    docker: Option<String>,
    tls: Option<TlsFiles>,
}

pub async fn gc(a: &GcArgs) -> Result<i32, Error> {
    if !a.containers {
        return Err(Error::Usage(
            "say what to collect: `heddle gc --containers` (for the cache: `heddle cache gc`)"
                .into(),
        ));
    }
    let targets = targets(a)?;
    // A container whose heddle is still running on this host belongs to a live run.
    let me = heddle_runner::hostname::hostname();
    let mut failed = false;
    for t in &targets {
        match clean(t, &me, a.all).await {
            Ok(n) => say!(
                "removed {n} heddle container{} on {}",
                if n == 1 { "" } else { "s" },
                t.name
            ),
            // The other engines are still cleaned; the exit code says one was not.
            Err(e) => {
                failed = true;
                eprintln!("{}", printable(&render(&e.into())));
            }
        }
    }
    Ok(if failed { EXIT_INVALID } else { EXIT_OK })
}

/// The default engine (or `--docker-host`), then each configured host at another address.
fn targets(a: &GcArgs) -> Result<Vec<Target>, Error> {
    let default = a
        .docker_host
        .clone()
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()));
    let mut targets = vec![Target {
        name: match &default {
            Some(h) => format!("the default engine ({h})"),
            None => "the default engine".to_string(),
        },
        docker: a.docker_host.clone(),
        tls: None,
    }];
    let root = std::env::current_dir().unwrap_or_default();
    let mut seen: HashSet<String> = default.into_iter().collect();
    for h in crate::session::load_hosts(&root)?.hosts.into_values() {
        if seen.insert(h.docker.clone()) {
            targets.push(Target {
                name: format!("host {} ({})", h.name, h.docker),
                docker: Some(h.docker),
                tls: h.tls,
            });
        }
    }
    Ok(targets)
}

async fn clean(
    t: &Target,
    me: &str,
    all: bool,
) -> Result<usize, heddle_containers::ContainerError> {
    let engine = Engine::connect_with(t.docker.as_deref(), t.tls.as_ref()).await?;
    engine
        .remove_labelled_unless(None, |labels| {
            !all && labels.get("heddle.host").map(String::as_str) == Some(me)
                && labels
                    .get("heddle.pid")
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_some_and(heddle_runner::liveness::pid_alive)
        })
        .await
}

//! `heddle gc --containers`: remove the containers a crashed run left behind, sparing those of
//! runs still going on this host.

use crate::error::{Error, EXIT_OK};

#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Remove every container labelled heddle.managed=true.
    #[arg(long)]
    containers: bool,
    /// Docker host (default: DOCKER_HOST or the local socket).
    #[arg(long)]
    docker_host: Option<String>,
    /// Also remove containers of heddle runs that are still going.
    #[arg(long)]
    all: bool,
}

pub async fn gc(a: &GcArgs) -> Result<i32, Error> {
    if !a.containers {
        return Err(Error::Usage(
            "say what to collect: `heddle gc --containers` (for the cache: `heddle cache gc`)"
                .into(),
        ));
    }
    let engine = heddle_containers::Engine::connect(a.docker_host.as_deref()).await?;
    // A container whose heddle is still running on this host belongs to a live run.
    let me = heddle_runner::sched::hostname();
    let all = a.all;
    let n = engine
        .remove_labelled_unless(None, |labels| {
            !all && labels.get("heddle.host") == Some(&me)
                && labels
                    .get("heddle.pid")
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_some_and(heddle_runner::liveness::pid_alive)
        })
        .await?;
    println!(
        "removed {n} heddle container{}",
        if n == 1 { "" } else { "s" }
    );
    Ok(EXIT_OK)
}

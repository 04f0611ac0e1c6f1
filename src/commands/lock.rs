//! `heddle lock` (write the lock file from the cache) and `heddle status` (compare the
//! pipeline as it stands with its lock file): the two commands about the lock file.

use std::collections::BTreeSet;
use std::path::Path;

use heddle_cache::error_chain;
use heddle_runner::lock::{self, LockFile};
use heddle_runner::prepare::Context;
use heddle_runner::preview::{preview, CacheHistory, PlanRow};
use heddle_runner::run_options::RunOptions;
use heddle_runner::units::engine::{self, HostLocks};
use heddle_runner::units::machine::{self, MachineUnitHolder};

use crate::error::{Error, EXIT_OK, EXIT_STAGE_FAILED};
use crate::printable::{printable_line, say};
use crate::session::{display_rel, PipelineArgs, Session};

#[derive(clap::Args, Debug)]
pub struct LockArgs {
    #[command(flatten)]
    p: PipelineArgs,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    p: PipelineArgs,
    /// Exit 1 when anything differs from the lock.
    #[arg(long)]
    check: bool,
    #[arg(long)]
    json: bool,
}

pub async fn lock(s: &Session, a: &LockArgs) -> Result<i32, Error> {
    let (plan, ctx) = s.prepared(&a.p).await?;
    let history = CacheHistory::new(&ctx.store);
    let rows = preview(&ctx, &RunOptions::default(), &history, true);
    let missing: Vec<String> = rows
        .iter()
        .filter(|r| !r.cached)
        .map(|r| r.label.clone())
        .collect();
    if !missing.is_empty() {
        return Err(Error::NotCached(missing));
    }
    let path = lock::lock_path(&plan.pipeline.file);
    LockFile::from_rows(&plan, &ctx.images, &rows).write(&path)?;
    say!("wrote {}", display_rel(&path));
    Ok(EXIT_OK)
}

/// What `status` found: the rows against the lock, and the locked instances now gone.
struct Comparison<'a> {
    rows: Vec<PlanRow>,
    removed: Vec<&'a str>,
    changed: usize,
}

pub async fn status(s: &Session, a: &StatusArgs) -> Result<i32, Error> {
    let (plan, ctx) = s.prepared(&a.p).await?;
    let path = lock::lock_path(&plan.pipeline.file);
    let lockfile = LockFile::read(&path).map_err(Error::NoLock)?;
    let rows = preview(&ctx, &RunOptions::default(), &lockfile.index(), false);
    let labels: BTreeSet<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let removed: Vec<&str> = lockfile
        .instances
        .iter()
        .map(|i| i.label.as_str())
        .filter(|l| !labels.contains(l))
        .collect();
    let changed = rows.iter().filter(|r| !r.cached).count();
    let cmp = Comparison {
        rows,
        removed,
        changed,
    };
    let held: Vec<MachineUnitHolder> = machine::holders(&machine::lock_dir())
        .into_iter()
        .filter(|h| plan.pipeline.host_pools.contains(&h.pool))
        .collect();
    let engine_held = engine_locks(&ctx).await;
    if a.json {
        print_json(&path, &cmp, &held, &engine_held);
    } else {
        print_text(&path, &cmp, &held, &engine_held);
    }
    Ok(if a.check && (cmp.changed > 0 || !cmp.removed.is_empty()) {
        EXIT_STAGE_FAILED
    } else {
        EXIT_OK
    })
}

/// Each configured host with engine-wide pools, by name, and what its engine says of them
/// (asked of every host at once, each with a short limit).
async fn engine_locks(ctx: &Context) -> Vec<(String, HostLocks)> {
    let hosts: Vec<_> = ctx
        .placement
        .hosts()
        .filter(|h| !h.engine_wide.is_empty())
        .collect();
    let locks = futures_util::future::join_all(hosts.iter().map(|h| engine::locks_on((*h).into())));
    hosts
        .iter()
        .map(|h| h.name.clone())
        .zip(locks.await)
        .collect()
}

fn print_json(
    path: &Path,
    cmp: &Comparison,
    held: &[MachineUnitHolder],
    engine_held: &[(String, HostLocks)],
) {
    let held: Vec<_> = held
        .iter()
        .map(|h| serde_json::json!({"pool": h.pool, "unit": h.unit, "pid": h.pid, "run": h.run_id, "instance": h.instance, "since_unix": h.since_unix}))
        .collect();
    let mut engine_units = Vec::new();
    let mut unreachable = Vec::new();
    for (host, locks) in engine_held {
        match locks {
            HostLocks::Held(locks) => engine_units.extend(locks.iter().filter_map(|l| {
                let h = l.holder.as_ref()?;
                Some(serde_json::json!({"host": host, "pool": h.pool, "unit": h.unit, "pid": h.pid, "hostname": h.hostname, "run": h.run, "instance": h.instance, "since_unix": h.since_unix, "running": l.running}))
            })),
            HostLocks::Unreachable(why) => {
                unreachable.push(serde_json::json!({"host": host, "reason": error_chain(why)}))
            }
        }
    }
    let v = serde_json::json!({"lock": path, "instances": cmp.rows, "removed": cmp.removed, "host_units_held": held, "engine_units_held": engine_units, "hosts_unreachable": unreachable});
    println!("{}", serde_json::to_string_pretty(&v).expect("json"));
}

fn print_text(
    path: &Path,
    cmp: &Comparison,
    held: &[MachineUnitHolder],
    engine_held: &[(String, HostLocks)],
) {
    for h in held {
        say!(
            "held     {}#{} by pid {}, run {} ({}), since {}",
            h.pool,
            h.unit,
            h.pid.map_or("?".into(), |p| p.to_string()),
            h.run_id,
            h.instance,
            h.since_unix.map_or("?".into(), |t| format!("unix {t}")),
        );
    }
    for (host, locks) in engine_held {
        match locks {
            HostLocks::Held(locks) => {
                for l in locks {
                    let Some(h) = &l.holder else { continue };
                    say!(
                        "held     {}#{} on host {host} by {}",
                        h.pool,
                        h.unit,
                        engine::describe(l)
                    );
                }
            }
            HostLocks::Unreachable(why) => {
                say!(
                    "unknown  units on host {host}: unreachable ({})",
                    error_chain(why)
                )
            }
        }
    }
    let rows = &cmp.rows;
    let labels: Vec<_> = rows.iter().map(|r| printable_line(&r.label)).collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    for (r, label) in rows.iter().zip(&labels) {
        if r.cached {
            println!("same     {label:width$}");
        } else {
            say!("changed  {label:width$}  {}", r.reason);
        }
    }
    for l in &cmp.removed {
        say!("removed  {l}");
    }
    say!(
        "{} instances against {}: {} as locked, {} changed, {} removed",
        rows.len(),
        display_rel(path),
        rows.len() - cmp.changed,
        cmp.changed,
        cmp.removed.len()
    );
}
